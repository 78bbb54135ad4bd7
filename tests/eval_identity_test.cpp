// eval_identity_test.cpp — the identity rule: a journal is bound to the exact model (content hash of
// weights and architecture), backend, layout and scoring options it was created with, and a
// checkpoint to the model it was written with. Refused here: evaluating into a journal after the model
// trained on, after swapping in another seed's model, and loading a checkpoint whose same-shape tensors
// were swapped or whose config was edited (the checksum binds bytes to names, shapes and the header),
// or whose shapes are negative.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/hash.h"
#include "core/io.h"
#include "eval/journal.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "model/load.h"
#include "testing.h"
#include "train/trainer.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;

using testutil::error_of;
using testutil::tmp_dir;

Preset tiny() {
  Preset p = testutil::tiny_preset("w8s8-1kv");
  p.train.steps = 4;
  p.train.warmup = 2;
  p.train.ckpt_every = 2;
  return preset_from_json(preset_to_json(p), "tiny w8s8-1kv");
}

EvalResults eval_into(const std::string& checkpoint, const std::string& out, bool fresh = false) {
  LoadedModel m = model_load(checkpoint);
  EvalOptions opt = eval_options_for(m.preset, PadProtocol::Prefix, 64, 8, 1);
  opt.report = false;
  opt.fresh = fresh;
  ModelBackend backend(std::move(m), opt.model);
  return run_eval(backend, opt, out);
}

TrainOptions quiet(const std::string& dir) {
  TrainOptions o;
  o.out_dir = dir;
  o.log = [](const std::string&) {};
  return o;
}

// train to step 2, eval into E; train on to step 4, eval into E again: refused (reusing the lines scored
// by the step-2 model would mix two models); --fresh starts over with the new model
TEST(Identity, JournalRefusesTheSameRunAfterMoreTraining) {
  const std::string ck = tmp_dir("more_ck"), out = tmp_dir("more_eval");
  Preset p = tiny();
  TrainOptions o = quiet(ck);
  o.stop_after = 2;
  train_run(p, o);
  const std::string hash2 = model_load(ck).hash;
  eval_into(ck, out);
  EXPECT_EQ(journal_load(out + "/journal.jsonl").identity.at("backend").find(hash2) != std::string::npos,
            true);
  eval_into(ck, out);  // the same model resumes: nothing to score, no refusal

  o.stop_after = -1;
  train_run(p, o);  // on to step 4
  const std::string hash4 = model_load(ck).hash;
  ASSERT_NE(hash2, hash4);
  const std::string err = error_of([&] { eval_into(ck, out); });
  EXPECT_NE(err.find("belongs to another run: its backend is"), std::string::npos) << err;
  EXPECT_NE(err.find(hash2), std::string::npos) << err;
  EXPECT_NE(err.find("--fresh"), std::string::npos) << err;

  eval_into(ck, out, /*fresh=*/true);
  const JournalLoad jl = journal_load(out + "/journal.jsonl");
  EXPECT_NE(jl.identity.at("backend").find(hash4), std::string::npos);
  EXPECT_EQ(jl.records.size(), 64u);  // every sample scored again, by the step-4 model
}

// a checkpoint of another seed evaluated into an existing journal: refused
TEST(Identity, JournalRefusesAnotherSeedsModel) {
  const std::string a = tmp_dir("seed_a"), b = tmp_dir("seed_b"), out = tmp_dir("seed_eval");
  Preset p = tiny();
  train_write_init(p, a);
  p.train.seed += 1;
  train_write_init(p, b);
  eval_into(a, out);
  const std::string err = error_of([&] { eval_into(b, out); });
  EXPECT_NE(err.find("belongs to another run"), std::string::npos) << err;
}

// a journal written before identities existed (no first line) cannot be trusted: refused with the fix
TEST(Identity, JournalWithoutIdentityIsRefused) {
  const std::string ck = tmp_dir("legacy_ck"), out = tmp_dir("legacy_eval");
  train_write_init(tiny(), ck);
  eval_into(ck, out);
  const std::string path = out + "/journal.jsonl";
  std::vector<std::string> lines = io_read_lines(path);
  ASSERT_GT(lines.size(), 1u);
  std::string rest;
  for (size_t i = 1; i < lines.size(); ++i) rest += lines[i] + "\n";
  io_write_atomic(path, rest);  // drop the identity line
  const std::string err = error_of([&] { eval_into(ck, out); });
  EXPECT_NE(err.find("no identity line"), std::string::npos) << err;
  eval_into(ck, out, /*fresh=*/true);
  EXPECT_TRUE(journal_load(path).has_identity);
}

// A checkpoint's safetensors header, parsed, and its data section.
struct CheckpointBytes {
  nlohmann::json header;
  std::string data;
  std::string tensor(const std::string& name) const {  // one tensor's bytes
    const auto& o = header[name]["data_offsets"];
    return data.substr(o[0].get<size_t>(), o[1].get<size_t>() - o[0].get<size_t>());
  }
};
CheckpointBytes checkpoint_bytes(const std::string& path) {
  const std::string bytes = io_read_text(path);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  return {nlohmann::json::parse(bytes.substr(8, len)), bytes.substr(8 + len)};
}
void checkpoint_write_raw(const std::string& path, const CheckpointBytes& c) {
  std::string hs = c.header.dump();
  while (hs.size() % 8) hs += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(hs.size()) >> (8 * i)) & 0xff);
  io_write_atomic(path, out + hs + c.data);
}

// swap the data offsets of two same-shape tensors: the bytes in offset order are
// unchanged, but the checksum binds each tensor's bytes to its name, so the file is refused
TEST(Identity, CheckpointRefusesSwappedTensors) {
  const std::string ck = tmp_dir("swap_ck");
  train_write_init(tiny(), ck);
  const std::string path = checkpoint_path(ck);
  CheckpointBytes c = checkpoint_bytes(path);
  std::string a, b;  // two tensors of one shape and different contents
  for (const auto& [name, e] : c.header.items())
    for (const auto& [name2, e2] : c.header.items())
      if (a.empty() && name != "__metadata__" && name2 != "__metadata__" && name < name2 &&
          name.rfind("model.", 0) == 0 && name2.rfind("model.", 0) == 0 && e["shape"] == e2["shape"] &&
          c.tensor(name) != c.tensor(name2))
        a = name, b = name2;
  ASSERT_FALSE(a.empty());
  std::swap(c.header[a]["data_offsets"], c.header[b]["data_offsets"]);
  checkpoint_write_raw(path, c);
  const std::string err = error_of([&] { model_load(ck); });
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << a << " <-> " << b << ": " << err;
  EXPECT_NE(err.find("Fix:"), std::string::npos) << err;
}

// a config field edited in the header (rope_theta) is refused: the checksum covers the header
TEST(Identity, CheckpointRefusesAnEditedConfig) {
  const std::string ck = tmp_dir("edit_ck");
  train_write_init(tiny(), ck);
  const std::string path = checkpoint_path(ck);
  CheckpointBytes c = checkpoint_bytes(path);
  nlohmann::json own = nlohmann::json::parse(c.header["__metadata__"]["phasescope"].get<std::string>());
  const std::string before = own.dump();
  std::function<void(nlohmann::json&)> edit = [&](nlohmann::json& j) {  // every rope_theta, anywhere
    if (j.is_object())
      for (auto& [k, v] : j.items()) {
        if (k == "rope_theta") v = 12345.0;
        edit(v);
      }
    else if (j.is_array())
      for (auto& v : j) edit(v);
  };
  edit(own);
  ASSERT_NE(own.dump(), before) << "the header holds no rope_theta";
  c.header["__metadata__"]["phasescope"] = own.dump();
  checkpoint_write_raw(path, c);
  const std::string err = error_of([&] { model_load(ck); });
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
}

// negative, fractional or absurd shapes are refused by name, before any allocation
TEST(Identity, CheckpointRefusesBadShapes) {
  const std::string ck = tmp_dir("shape_ck");
  train_write_init(tiny(), ck);
  const std::string path = checkpoint_path(ck);
  const CheckpointBytes c0 = checkpoint_bytes(path);
  std::string name;
  for (const auto& [k, e] : c0.header.items())
    if (k != "__metadata__" && e["shape"].size() == 2) name = k;
  ASSERT_FALSE(name.empty());
  for (const nlohmann::json& shape : {nlohmann::json{-4, -8}, nlohmann::json{2.5, 3},
                                      nlohmann::json{int64_t(1) << 50, 1}, nlohmann::json("4x4")}) {
    CheckpointBytes c = c0;
    c.header[name]["shape"] = shape;
    checkpoint_write_raw(path, c);
    const std::string err = error_of([&] { model_load(ck); });
    EXPECT_NE(err.find(name), std::string::npos) << shape << ": " << err;
    EXPECT_NE(err.find("shape"), std::string::npos) << shape << ": " << err;
  }
  CheckpointBytes c = c0;
  c.header[name]["data_offsets"] = {-8, 0};
  checkpoint_write_raw(path, c);
  EXPECT_NE(error_of([&] { model_load(ck); }).find("data_offsets"), std::string::npos);
}

// a checkpoint of an older phasescope (checksum of the bytes in offset order) still loads
TEST(Identity, LegacyChecksumStillLoads) {
  const std::string ck = tmp_dir("legacy_sum_ck");
  train_write_init(tiny(), ck);
  const std::string path = checkpoint_path(ck);
  CheckpointBytes c = checkpoint_bytes(path);
  uint64_t sum = kFnvOffset;  // data is written in offset order without gaps
  sum = fnv1a(c.data, sum);
  c.header["__metadata__"]["phasescope_checksum"] = std::to_string(sum);
  checkpoint_write_raw(path, c);
  EXPECT_NO_THROW(model_load(ck));
  c.data[c.data.size() - 3] ^= 0x11;  // and its bytes are still checked
  checkpoint_write_raw(path, c);
  EXPECT_NE(error_of([&] { model_load(ck); }).find("checksum mismatch"), std::string::npos);
}

// the identity names what decides answers, never a port: an HTTP backend's excludes the URL
TEST(Identity, BackendIdentityOfTheInProcessModel) {
  const std::string ck = tmp_dir("ident_ck");
  train_write_init(tiny(), ck);
  LoadedModel m = model_load(ck);
  const std::string hash = m.hash;
  EXPECT_EQ(hash.size(), 16u);
  EXPECT_EQ(model_load(ck).hash, hash);  // deterministic
  ModelBackend backend(std::move(m), "tiny");
  EXPECT_EQ(backend.identity(), "in-process fp32 model " + hash + " top-5");
}

}  // namespace
}  // namespace phasescope
