// io.h — the one place for file I/O: checked reads and atomic, durable writes, with errors that name
// the path and the fix. Every module reads and writes files through these (no hand-rolled streams).
//   io_read_text   the whole file, binary-safe; a missing or unreadable file is an Error with `fix`;
//   io_read_lines  the non-empty lines, split on '\n' (a trailing '\r' removed; a last line without '\n'
//   kept); io_write_atomic  temp file in the same folder, fsync, rename over the target, fsync the folder:
//                  after it returns the new content survives a crash; before, the old one stays whole;
//   io_make_dirs   create a folder and its parents (an existing file in the way is an Error).
// Not here: append-only journals (eval/journal.h keeps one fd open and writes a line per call) or
// byte-range reads of large tensor files (model/safetensors_file.h).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace phasescope {

std::string io_read_text(const std::string& path,
                         const std::string& fix = "check the path and its permissions");
std::vector<std::string> io_read_lines(const std::string& path,
                                       const std::string& fix = "check the path and its permissions");
bool io_exists(const std::string& path);

void io_write_atomic(const std::string& path, const std::string& bytes);
// The same for content written piecewise: `fill(fd, tmp_path)` writes into the temp file's fd
// (io_write_all below); on an exception the temp file is removed and the target left as it was.
void io_write_atomic_with(const std::string& path,
                          const std::function<void(int fd, const std::string& tmp)>& fill);
// write(2) all n bytes or fail naming `path`.
void io_write_all(int fd, const char* data, size_t n, const std::string& path);

void io_make_dirs(const std::string& dir);

// Remove the temp files io_write_atomic* left in dir (".<name>.tmp.<pid>") when the process that wrote
// them is gone (killed mid-write); another live process's are left alone. Returns how many were removed.
int io_remove_stale_temps(const std::string& dir);

}  // namespace phasescope
