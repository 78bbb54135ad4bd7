// safetensors_file.cpp — see safetensors_file.h.
#include "model/safetensors_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/json_fields.h"

namespace phasescope {

using json = nlohmann::json;

namespace {

// pread exactly n bytes at `offset` or fail naming the file.
std::string pread_exact(const std::string& path, uint64_t offset, uint64_t n) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno), "check the path and its permissions");
  std::string buf(size_t(n), '\0');
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, &buf[size_t(done)], size_t(n - done), off_t(offset + done));
    if (r <= 0) {
      ::close(fd);
      fail(path,
           "read failed at byte " + std::to_string(offset + done) +
               (r < 0 ? std::string(": ") + std::strerror(errno) : " (end of file)"),
           "the file is truncated or unreadable: download it again");
    }
    done += uint64_t(r);
  }
  ::close(fd);
  return buf;
}

torch::Dtype torch_dtype_of(const std::string& dt) {
  if (dt == "F64") return torch::kFloat64;
  if (dt == "F32") return torch::kFloat32;
  if (dt == "F16") return torch::kHalf;
  if (dt == "BF16") return torch::kBFloat16;
  if (dt == "I64") return torch::kInt64;
  if (dt == "I32") return torch::kInt32;
  if (dt == "I16") return torch::kInt16;
  if (dt == "I8") return torch::kInt8;
  if (dt == "U8" || dt == "F8_E4M3" || dt == "F8_E8M0") return torch::kUInt8;  // FP8: decoded by table
  if (dt == "BOOL") return torch::kBool;
  return torch::kUInt8;
}

// value table of an 8-bit float format, indexed by the code
torch::Tensor fp8_table(double (*value)(uint8_t)) {
  std::vector<double> v(256);
  for (int b = 0; b < 256; ++b) v[size_t(b)] = value(uint8_t(b));
  return torch::tensor(v, torch::kFloat64);
}

}  // namespace

int safetensors_dtype_size(const std::string& dt) {
  if (dt == "F64" || dt == "I64") return 8;
  if (dt == "F32" || dt == "I32") return 4;
  if (dt == "F16" || dt == "BF16" || dt == "I16") return 2;
  if (dt == "I8" || dt == "U8" || dt == "F8_E4M3" || dt == "F8_E8M0" || dt == "BOOL") return 1;
  return 0;
}

double fp8_e4m3_value(uint8_t code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m / 8.0, -6);  // subnormal: (m/8) * 2^(1 - bias)
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

double fp8_e8m0_value(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, int(code) - 127);
}

SafetensorsFile safetensors_open(const std::string& path) {
  const std::string fix = "the file is not a complete safetensors file: download or convert it again";
  SafetensorsFile f;
  f.path = path;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    fail(path, std::string("cannot open: ") + std::strerror(errno), "check the path and its permissions");
  const off_t size = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  if (size < 8)
    fail(path, "file too short for a safetensors header (" + std::to_string(size) + " bytes)", fix);
  f.file_size = uint64_t(size);
  const std::string lenbuf = pread_exact(path, 0, 8);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t(uint8_t(lenbuf[size_t(i)])) << (8 * i);
  if (len > f.file_size - 8)
    fail(path, "header length " + std::to_string(len) + " exceeds the file size", fix);
  if (len > (uint64_t(100) << 20))
    fail(path, "header of " + std::to_string(len) + " bytes (over 100 MB)", fix);
  f.header_bytes = 8 + len;
  f.bytes_read = f.header_bytes;
  json header = json_parse_or_fail(pread_exact(path, 8, len), path + " header", fix);
  if (!header.is_object()) fail(path, "the header is not a JSON object", fix);

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      f.metadata_json = e.dump();
      continue;
    }
    const std::string where = path + " tensor '" + name + "'";
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      fail(where, "entry must have dtype (string), shape (array) and data_offsets [begin, end]", fix);
    SafetensorsEntry t;
    t.dtype = e["dtype"].get<std::string>();
    const int esize = safetensors_dtype_size(t.dtype);
    if (esize == 0)
      fail(where, "unsupported dtype '" + t.dtype + "'",
           "phasescope reads F64, F32, F16, BF16, F8_E4M3, F8_E8M0, I64, I32, I16, I8, U8 and BOOL tensors");
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail(where, "shape entries must be integers >= 0", fix);
      t.shape.push_back(d.get<int64_t>());
      numel *= uint64_t(t.shape.back());
    }
    for (const auto& o : e["data_offsets"])
      if (!o.is_number_unsigned()) fail(where, "data_offsets must be integers >= 0", fix);
    const uint64_t b = e["data_offsets"][0].get<uint64_t>(), en = e["data_offsets"][1].get<uint64_t>();
    if (en < b || en - b != numel * uint64_t(esize))
      fail(where,
           "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] do not hold " +
               std::to_string(numel) + " values of " + t.dtype,
           fix);
    if (f.header_bytes + en > f.file_size)
      fail(where, "its bytes end past the end of the file (" + std::to_string(f.file_size) + " bytes)", fix);
    t.begin = f.header_bytes + b;
    t.end = f.header_bytes + en;
    ranges.push_back({t.begin, t.end});
    f.tensors[name] = t;
  }
  if (f.metadata_json.empty()) f.metadata_json = "{}";
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail(path, "two tensors' byte ranges overlap", fix);
  return f;
}

std::string safetensors_read_raw(SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end())
    fail(f.path, "no tensor named '" + name + "'", "check the tensor name (and the checkpoint's layout)");
  const uint64_t n = it->second.end - it->second.begin;
  f.bytes_read += n;
  return pread_exact(f.path, it->second.begin, n);
}

torch::Tensor safetensors_read(SafetensorsFile& f, const std::string& name, torch::Dtype out) {
  std::string raw = safetensors_read_raw(f, name);
  const SafetensorsEntry& e = f.tensors.at(name);
  auto t = torch::from_blob(raw.data(), {int64_t(raw.size()) / safetensors_dtype_size(e.dtype)},
                            torch_dtype_of(e.dtype))
               .clone();  // owns its memory past `raw`
  if (e.dtype == "F8_E4M3") {
    static const torch::Tensor table = fp8_table(fp8_e4m3_value);
    t = table.index({t.to(torch::kInt64)});
  } else if (e.dtype == "F8_E8M0") {
    static const torch::Tensor table = fp8_table(fp8_e8m0_value);
    t = table.index({t.to(torch::kInt64)});
  }
  return t.to(out).reshape(e.shape);
}

}  // namespace phasescope
