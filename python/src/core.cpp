// core.cpp — phasescope._core, the pybind11 face of the C++ library for the Python package (python/
// phasescope/). Built against the torch that is installed (Debian's python3-torch shares libtorch with
// libtorch-dev, so a torch.Tensor crosses as the same at::Tensor and autograd runs through the C++ kernels
// unchanged). Thin by design: every computation is a library call; this file converts and checks inputs.
// phasescope::Error becomes phasescope.Error (a ValueError) with the C++ text, which names the field and
// the fix. Not here: the Python classes users touch (phasescope/nn.py, evaluate.py), which wrap these.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attention/attention.h"
#include "attention/config.h"
#include "core/check.h"
#include "core/runtime.h"
#include "eval/card.h"
#include "eval/layout.h"
#include "eval/model_backend.h"
#include "eval/results.h"
#include "eval/runner.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/load.h"
#include "py_backend.h"

namespace py = pybind11;
using namespace phasescope;
using json = nlohmann::json;

namespace {

// One attention layer whose parameters live in Python: each call binds the given tensors (the Python
// module's nn.Parameters, in param_names() order) into the C++ module, so gradients reach them.
struct PyAttention {
  Attention module{nullptr};
  std::vector<std::string> names;
  explicit PyAttention(const std::string& config_json) {
    const AttnConfig cfg = attn_config_from_json(config_json, "phasescope.nn.Attention config");
    module = Attention(cfg);
    for (const auto& item : module->named_parameters()) names.push_back(item.key());
  }
  void bind(const std::vector<torch::Tensor>& params, const torch::Tensor& x) {
    if (params.size() != names.size())
      fail("phasescope.nn.Attention",
           fmt::format("got {} parameters, expected {}", params.size(), names.size()),
           "pass the module's own parameters (a bug if you did not call the core directly)");
    for (size_t i = 0; i < names.size(); ++i) {
      if (params[i].scalar_type() != x.scalar_type())
        fail("phasescope.nn.Attention",
             fmt::format("parameter {} is {} but the input is {}", names[i],
                         c10::toString(params[i].scalar_type()), c10::toString(x.scalar_type())),
             "convert the module and its input to one dtype (module.double() with a float64 input)");
      module->param(names[i]) = params[i];
    }
  }
  void check_input(const torch::Tensor& x, const char* what) const {
    const AttnConfig& c = module->config();
    if (x.dim() != 3 || x.size(2) != c.d_model)
      fail(
          std::string("phasescope.nn.Attention.") + what,
          fmt::format("input x has shape {}, expected [B, T, d_model = {}]", shape_str(x.sizes()), c.d_model),
          "pass hidden states of shape [batch, tokens, d_model]");
    if (x.scalar_type() != torch::kFloat32 && x.scalar_type() != torch::kFloat64)
      fail(std::string("phasescope.nn.Attention.") + what,
           fmt::format("input x is {}, not float32 or float64", c10::toString(x.scalar_type())),
           "convert it with x.float() or x.double()");
    if (!x.device().is_cpu())
      fail(std::string("phasescope.nn.Attention.") + what, "input x is not on the CPU",
           "phasescope's kernels are CPU kernels: x.cpu()");
    if (!x.is_contiguous())
      fail(std::string("phasescope.nn.Attention.") + what,
           fmt::format("input x of shape {} is not contiguous (strides {})", shape_str(x.sizes()),
                       shape_str(x.strides())),
           "pass x.contiguous()");
  }
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "phasescope's C++ core (see the phasescope package)";
  py::register_exception<Error>(m, "Error", PyExc_ValueError);
  runtime_init();

  // attention
  py::class_<PyAttention>(m, "AttentionCore")
      .def(py::init<const std::string&>())
      .def("param_names", [](const PyAttention& a) { return a.names; })
      .def("initial_params",
           [](const PyAttention& a) {
             std::vector<torch::Tensor> out;
             for (const auto& item : a.module->named_parameters())
               out.push_back(item.value().detach().clone());
             return out;
           })
      .def("config_json", [](const PyAttention& a) { return attn_config_to_json(a.module->config()); })
      .def(
          "forward",
          [](PyAttention& a, const std::vector<torch::Tensor>& params, const torch::Tensor& x, int64_t pos0) {
            a.check_input(x, "forward");
            a.bind(params, x);
            return a.module->forward(x, pos0);
          })
      .def(
          "reference",
          [](PyAttention& a, const std::vector<torch::Tensor>& params, const torch::Tensor& x, int64_t pos0) {
            // the fp64 scalar oracle (attention/reference.h) on the same parameters, one row at a time
            a.check_input(x, "reference");
            if (params.size() != a.names.size())
              fail("reference", "wrong parameter count", "pass the module's");
            RefParams ref;
            for (size_t i = 0; i < a.names.size(); ++i) {
              const torch::Tensor t = params[i].detach().to(torch::kFloat64).contiguous();
              ref[a.names[i]] =
                  RefTensor{t.sizes().vec(),
                            std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel())};
            }
            const torch::Tensor xd = x.detach().to(torch::kFloat64).contiguous();
            const int64_t B = xd.size(0), T = xd.size(1), d = xd.size(2);
            torch::Tensor out = torch::empty({B, T, d}, torch::kFloat64);
            for (int64_t b = 0; b < B; ++b) {
              const std::vector<double> row(xd[b].data_ptr<double>(), xd[b].data_ptr<double>() + T * d);
              const std::vector<double> y = reference_attention(a.module->config(), ref, row, int(T), pos0);
              std::copy(y.begin(), y.end(), out[b].data_ptr<double>());
            }
            return out;
          })
      .def("time_forward_backward",
           [](PyAttention& a, const std::vector<torch::Tensor>& params, const torch::Tensor& x, int reps) {
             // the benchmark's C++ side: forward + backward of sum(y) `reps` times with no Python in the
             // loop; returns the seconds of each
             a.check_input(x, "time_forward_backward");
             a.bind(params, x);
             std::vector<double> out;
             py::gil_scoped_release release;
             for (int r = 0; r < reps; ++r) {
               const auto t0 = std::chrono::steady_clock::now();
               a.module->forward(x, 0).sum().backward();
               out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
             }
             return out;
           })
      .def("prefill",
           [](PyAttention& a, const std::vector<torch::Tensor>& params, const torch::Tensor& x) {
             a.check_input(x, "prefill");
             a.bind(params, x);
             auto cache = std::make_shared<AttnCache>();
             torch::Tensor y = a.module->prefill(x, cache.get());
             return std::make_pair(y, cache);
           })
      .def("decode", [](PyAttention& a, const std::vector<torch::Tensor>& params, const torch::Tensor& x,
                        std::shared_ptr<AttnCache> cache) {
        a.check_input(x, "decode");
        if (x.size(1) != 1)
          fail("phasescope.nn.Attention.decode", fmt::format("x has {} tokens, expected 1", x.size(1)),
               "decode one token per call; prefill takes the prompt");
        a.bind(params, x);
        return a.module->decode(x, cache.get());
      });
  py::class_<AttnCache, std::shared_ptr<AttnCache>>(m, "AttnCache")
      .def_readonly("pos", &AttnCache::pos)
      .def_readonly("entries", &AttnCache::entries)
      .def("values", &AttnCache::values);
  m.def("attention_kinds", [] {
    std::vector<std::string> out;
    for (AttnKind k : attn_all_kinds()) out.push_back(attn_kind_name(k));
    return out;
  });
  m.def("attention_default_config", [](const std::string& kind) {
    return attn_config_to_json(attn_config_default(attn_kind_parse(kind, "kind")));
  });

  // checkpoints: the C++ decoder, for inference and evaluation
  py::class_<LoadedModel>(m, "LoadedModel")
      .def_readonly("step", &LoadedModel::step)
      .def_readonly("hash", &LoadedModel::hash)
      .def("preset_json", [](const LoadedModel& l) { return preset_to_json(l.preset).dump(); })
      .def("named_parameters",
           [](const LoadedModel& l) {
             std::vector<std::pair<std::string, torch::Tensor>> out;
             for (const auto& item : l.model->named_parameters()) out.emplace_back(item.key(), item.value());
             return out;
           })
      .def("forward",
           [](LoadedModel& l, const torch::Tensor& tokens, int64_t pos0) {
             if (tokens.dim() != 2 || tokens.scalar_type() != torch::kInt64)
               fail("phasescope model forward", "tokens must be a LongTensor [B, T]", "pass torch.long ids");
             return l.model->forward(tokens.contiguous(), pos0);
           })
      .def("score", [](LoadedModel& l, const torch::Tensor& ids) {
        // log-probabilities [B, V] after each row's last token: the forward pass `eval` runs
        // (model/forward.h), which computes the last position's logits only
        if (ids.dim() != 2 || ids.scalar_type() != torch::kInt64)
          fail("phasescope Decoder.score", "ids must be a LongTensor [B, T]", "pass torch.long ids");
        const torch::Tensor c = ids.contiguous();
        std::vector<std::vector<int>> rows(size_t(c.size(0)));
        for (int64_t b = 0; b < c.size(0); ++b)
          rows[size_t(b)].assign(c[b].data_ptr<int64_t>(), c[b].data_ptr<int64_t>() + c.size(1));
        std::vector<const std::vector<int>*> ptrs;
        for (const auto& r : rows) ptrs.push_back(&r);
        py::gil_scoped_release release;
        torch::NoGradGuard g;
        return model_last_logprobs(*l.model, ptrs);
      });
  m.def("load", [](const std::string& dir) {
    LoadedModel l = model_load(dir);
    l.model->eval();
    return l;
  });

  // layouts, evaluation, results and cards
  m.def("layout", &py_layout, py::arg("spec_json"));
  m.def("evaluate", &py_evaluate, py::arg("score_fn"), py::arg("spec_json"), py::arg("out_dir"));
  m.def("evaluate_checkpoint", &py_evaluate_checkpoint, py::arg("spec_json"), py::arg("out_dir"));
  m.def("read_results", [](const std::string& path) { return results_to_json(results_read(path)).dump(); });
  m.def("read_card", [](const std::string& path) { return card_to_json(card_read(path)).dump(); });
}
