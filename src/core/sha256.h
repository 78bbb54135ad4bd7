// sha256.h — SHA-256 (FIPS 180-4) of bytes and of files, as lower-case hex: the checksum a person can
// recompute with `sha256sum`, for files the project records in a manifest (the corpus: data/corpus.h).
// Not the project's fingerprint of prompts, designs and checkpoints: that is core/hash.h (FNV-1a).
// Plain scalar code (~300 MB/s here); a file is read in 1 MiB pieces, never whole.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace phasescope {

// Incremental: update() any number of times, then hex() once.
struct Sha256 {
  Sha256();
  void update(const void* data, size_t n);
  std::string hex();  // 64 hex digits; ends the computation

 private:
  void block(const unsigned char* p);
  uint32_t h_[8];
  unsigned char buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
inline std::string sha256_hex(const std::string& s) { return sha256_hex(s.data(), s.size()); }

// The file's SHA-256; a missing or unreadable file is an Error naming it with `fix`.
std::string sha256_file(const std::string& path,
                        const std::string& fix = "check the path and its permissions");

}  // namespace phasescope
