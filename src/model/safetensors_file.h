// safetensors_file.h — read any safetensors file by byte ranges: the header alone on open, then
// only the bytes of the tensors asked for (pread), so one layer of a multi-gigabyte shard costs its
// own bytes, never the file's. Decodes the dtypes real checkpoints use (F64, F32, F16, BF16,
// F8_E4M3 with F8_E8M0 or F32 block scales, I64, I32, I16, I8, U8, BOOL) into a torch dtype.
// Every byte read is counted (bytes_read), so tests and `v4 layer` can show what a load cost.
// Not here: phasescope's own checkpoints with their checksummed header (checkpoint.h), or what a
// tensor name means (v4_checkpoint.h).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace phasescope {

// One tensor's entry in the header; offsets are absolute in the file.
struct SafetensorsEntry {
  std::string dtype;           // as written: "F32", "BF16", "F8_E4M3", ...
  std::vector<int64_t> shape;  // row-major
  uint64_t begin = 0;          // first byte (absolute file offset)
  uint64_t end = 0;            // one past the last byte
};

struct SafetensorsFile {
  std::string path;
  uint64_t file_size = 0;
  uint64_t header_bytes = 0;                        // 8 + the JSON header's length
  std::map<std::string, SafetensorsEntry> tensors;  // every tensor in the file
  std::string metadata_json;                        // the "__metadata__" object ("{}" if absent)
  uint64_t bytes_read = 0;                          // header + tensor bytes read so far
};

// Reads and checks the header only (offsets inside the file, sizes = dtype size x shape, no
// overlaps); an Error names the file, the tensor and the fix.
SafetensorsFile safetensors_open(const std::string& path);

// The raw bytes of one tensor (exactly its byte range; counted in f.bytes_read).
std::string safetensors_read_raw(SafetensorsFile& f, const std::string& name);

// One tensor decoded to `out` (a floating dtype for float sources; integer sources to kInt64 or
// a floating dtype). FP8 E4M3 is decoded exactly (its values are exact in fp32); BF16 and F16 too.
torch::Tensor safetensors_read(SafetensorsFile& f, const std::string& name, torch::Dtype out);

// Bytes per element of a safetensors dtype name; 0 if phasescope does not know it.
int safetensors_dtype_size(const std::string& dtype);

// The value of an FP8 E4M3 (OCP "e4m3fn": bias 7, no infinities, S.1111.111 = NaN, max 448) and
// an E8M0 scale byte (2^(b - 127), 0xFF = NaN).
double fp8_e4m3_value(uint8_t code);
double fp8_e8m0_value(uint8_t code);

}  // namespace phasescope
