// See regular_file.h.
#include "engine/core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace driftless {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string non_regular_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  return kind_of(st.st_mode);
}

int open_regular_file(const std::string& path, const char* component) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  DL_CHECK(fd >= 0, component,
           "expected a readable file, got " << path << ": " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    DL_FAIL(component, "expected to stat " << path << ", got " << std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    DL_FAIL(component,
            "expected a regular file, got " << path << " (" << kind_of(st.st_mode) << ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string& path, const char* component, size_t max_bytes) {
  const int fd = open_regular_file(path, component);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      DL_FAIL(component, "cannot read " << path << ": " << std::strerror(err));
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max_bytes) {
      ::close(fd);
      DL_FAIL(component, "expected at most " << max_bytes << " bytes in " << path
                                             << ", got more; is it the right file?");
    }
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace driftless
