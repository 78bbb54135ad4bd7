// checkpoint.cpp — see checkpoint.h.
#include "model/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/hash.h"
#include "core/io.h"
#include "core/json_fields.h"

namespace phasescope {

using json = nlohmann::json;

namespace {

std::string dtype_name(torch::Dtype t) {
  switch (t) {
    case torch::kFloat32:
      return "F32";
    case torch::kFloat64:
      return "F64";
    case torch::kInt64:
      return "I64";
    case torch::kUInt8:
      return "U8";
    default:
      return "";
  }
}

torch::Dtype dtype_parse(const std::string& s, const std::string& where) {
  if (s == "F32") return torch::kFloat32;
  if (s == "F64") return torch::kFloat64;
  if (s == "I64") return torch::kInt64;
  if (s == "U8") return torch::kUInt8;
  fail(where, "unsupported dtype '" + s + "'", "phasescope reads F32, F64, I64 and U8 tensors");
}

// Checkpoints written before the checksum covered names, shapes and the header store the decimal
// FNV-1a of the data bytes in offset order; they still load (their bytes are checked), with a warning.
const std::string kChecksumV2 = "v2-";

}  // namespace

// The checksum binds every tensor's bytes to its name, dtype and shape, and the whole data to the
// phasescope header (config, step, ...): swapping two same-shape tensors' offsets, or editing one
// config field, is a mismatch. Tensors are hashed in name order, whatever their offsets.
uint64_t checkpoint_digest(const std::vector<TensorRecord>& tensors, const std::string& header_json) {
  uint64_t h = fnv1a(std::string("phasescope-checkpoint-v2"));
  for (const auto& t : tensors) {
    std::string desc = t.name + '\0' + t.dtype;
    for (int64_t d : t.shape) desc += ':' + std::to_string(d);
    desc += '\0';
    h = fnv1a(desc, h);
    h = fnv1a(t.data, t.bytes, h);
  }
  return fnv1a(header_json, h);
}

void safetensors_save(const std::string& path, const TensorMap& tensors, const std::string& header_json) {
  // lay out the data section (names in map order) and checksum it
  std::vector<torch::Tensor> bufs;
  std::vector<TensorRecord> records;
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t0] : tensors) {
    auto t = t0.detach().to(torch::kCPU).contiguous();
    const std::string dt = dtype_name(t.scalar_type());
    PS_ASSERT(!dt.empty(), "safetensors_save: unsupported dtype for " + name);
    const uint64_t n = uint64_t(t.numel()) * t.element_size();
    header[name] = {{"dtype", dt}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    records.push_back({name, dt, t.sizes().vec(), t.data_ptr(), size_t(n)});
    offset += n;
    bufs.push_back(t);
  }
  header["__metadata__"] = {
      {"format", "pt"},
      {"phasescope", header_json},
      {"phasescope_checksum", kChecksumV2 + hash_hex(checkpoint_digest(records, header_json))}};
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';  // safetensors pads the header with spaces to 8-byte alignment
  io_write_atomic_with(path, [&](int fd, const std::string& tmp) {
    uint64_t len = h.size();
    char lenbuf[8];
    for (int i = 0; i < 8; ++i) lenbuf[i] = char((len >> (8 * i)) & 0xff);
    io_write_all(fd, lenbuf, 8, tmp);
    io_write_all(fd, h.data(), h.size(), tmp);
    for (const auto& t : bufs)
      io_write_all(fd, static_cast<const char*>(t.data_ptr()), size_t(t.numel()) * t.element_size(), tmp);
  });
}

TensorMap safetensors_load(const std::string& path, std::string* header_json) {
  const std::string fix = "the checkpoint is damaged or truncated: retrain, or restore it from a copy";
  const std::string bytes =
      io_read_text(path, "check the path (a checkpoint dir holds checkpoint.safetensors)");
  if (bytes.size() < 8)
    fail(path, "file too short for a safetensors header (" + std::to_string(bytes.size()) + " bytes)", fix);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  if (len > bytes.size() - 8)
    fail(path, "header length " + std::to_string(len) + " exceeds the file size", fix);
  json header = json_parse_or_fail(bytes.substr(8, len), path + " header", fix);
  const size_t data0 = 8 + len;
  const uint64_t data_size = bytes.size() - data0;
  if (!header.is_object() || !header.contains("__metadata__") ||
      !header["__metadata__"].contains("phasescope"))
    fail(path, "damaged, or not a phasescope checkpoint: its header has no __metadata__.phasescope",
         "pass a checkpoint written by phasescope train");

  // every tensor's dtype, shape and extent, checked before any byte is used
  TensorMap out;
  std::vector<TensorRecord> records;
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + " tensor '" + it.key() + "'";
    const json& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail(where, "entry lacks dtype/shape/data_offsets", fix);
    if (!e["dtype"].is_string()) fail(where, "dtype is not a string", fix);
    auto dtype = dtype_parse(e["dtype"].get<std::string>(), where);
    const json& js = e["shape"];
    const json& jo = e["data_offsets"];
    if (!js.is_array() || js.size() > 8)
      fail(where, "shape must be a list of at most 8 sizes, got " + js.dump(), fix);
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const json& d : js) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t(1) << 40))
        fail(where, "shape " + js.dump() + " holds a negative, non-integer or absurd size", fix);
      shape.push_back(d.get<int64_t>());
      numel *= uint64_t(shape.back());
      if (numel > data_size) numel = data_size + 1;  // no overflow: already more than the file holds
    }
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      fail(where, "data_offsets must be two non-negative integers, got " + jo.dump(), fix);
    const uint64_t b = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    const uint64_t esize = uint64_t(torch::elementSize(dtype));
    if (end < b || end > data_size || numel > data_size || (end - b) != numel * esize)
      fail(where,
           "byte range [" + std::to_string(b) + ", " + std::to_string(end) + ") does not fit the shape " +
               js.dump() + " or the file (" + std::to_string(data_size) + " data bytes)",
           fix);
    extents.push_back({b, end});
    auto t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
    std::memcpy(t.data_ptr(), bytes.data() + data0 + b, end - b);
    records.push_back({it.key(), e["dtype"].get<std::string>(), shape, t.data_ptr(), size_t(end - b)});
    out[it.key()] = t;
  }
  const json& meta = header["__metadata__"];
  if (!meta["phasescope"].is_string()) fail(path, "__metadata__.phasescope is not a string", fix);
  const std::string own_header = meta["phasescope"].get<std::string>();
  const std::string stored = meta.contains("phasescope_checksum") && meta["phasescope_checksum"].is_string()
                                 ? meta["phasescope_checksum"].get<std::string>()
                                 : "";
  if (stored.rfind(kChecksumV2, 0) == 0) {
    // records are in name order: the header is a sorted JSON object
    if (stored != kChecksumV2 + hash_hex(checkpoint_digest(records, own_header)))
      fail(path,
           "checksum mismatch: a tensor's bytes, name, dtype or shape, or the config in the header, "
           "differ from what was written",
           fix);
  } else {
    // legacy: the data bytes in offset order
    std::sort(extents.begin(), extents.end());
    uint64_t sum = kFnvOffset;
    for (const auto& [b, e] : extents) sum = fnv1a(bytes.data() + data0 + b, e - b, sum);
    if (stored != std::to_string(sum))
      fail(path, "data checksum mismatch (the tensor bytes were changed or cut)", fix);
    std::fprintf(stderr,
                 "warning: %s was written by an older phasescope whose checksum does not cover tensor names "
                 "or the config; a swapped tensor would go unseen (train one more step to rewrite it)\n",
                 path.c_str());
  }
  if (header_json) *header_json = own_header;
  return out;
}

}  // namespace phasescope
