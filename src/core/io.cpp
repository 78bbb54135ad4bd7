// io.cpp — see io.h.
#include "core/io.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace phasescope {

namespace fs = std::filesystem;

std::string io_read_text(const std::string& path, const std::string& fix) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(path, "is a directory, not a file", fix);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno), fix);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(path, "read failed", fix);
  return ss.str();
}

std::vector<std::string> io_read_lines(const std::string& path, const std::string& fix) {
  const std::string text = io_read_text(path, fix);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
    start = nl + 1;
  }
  return lines;
}

bool io_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

void io_write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(path, std::string("write failed: ") + std::strerror(errno),
           "check free disk space and permissions");
    }
    p += w;
    n -= size_t(w);
  }
}

void io_write_atomic_with(const std::string& path,
                          const std::function<void(int fd, const std::string& tmp)>& fill) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (fs::is_directory(target, ec))
    fail(path, "is a directory; a file was to be written there", "pass a file path, or remove the directory");
  if (!fs::is_directory(dir, ec))
    fail(dir.string(), "the folder to write " + target.filename().string() + " into does not exist",
         "create it first (or pass an existing --out folder)");
  const std::string tmp =
      (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    fail(tmp, std::string("cannot create: ") + std::strerror(errno), "check that the folder is writable");
  try {
    fill(fd, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail(tmp, "fsync/close failed", "check the disk");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail(path, "rename failed: " + why, "check permissions");
  }
  int dfd = ::open(dir.c_str(), O_RDONLY);  // make the rename itself durable
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void io_write_atomic(const std::string& path, const std::string& bytes) {
  io_write_atomic_with(
      path, [&](int fd, const std::string& tmp) { io_write_all(fd, bytes.data(), bytes.size(), tmp); });
}

void io_make_dirs(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail(dir, "exists and is not a folder", "pass a folder path (or remove the file)");
  fs::create_directories(dir, ec);
  if (ec) fail(dir, "cannot create the folder: " + ec.message(), "check the path and its permissions");
}

int io_remove_stale_temps(const std::string& dir) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (name.empty() || name[0] != '.' || at == std::string::npos || at + 5 >= name.size()) continue;
    const std::string pid_text = name.substr(at + 5);
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const pid_t pid = pid_t(std::stol(pid_text));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its writer may be alive
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace phasescope
