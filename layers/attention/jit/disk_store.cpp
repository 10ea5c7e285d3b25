// The kernel cache's files (disk_store.h): their format, their checks on reading, the
// temp-file-and-rename write that lets the ranks of one host share a directory, and the
// directory's trust checks, byte bound and cleaning of killed writers' temp files.
#include "layers/attention/jit/disk_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <sstream>
#include <vector>

namespace driftless::layers::jit {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "DLKC1";

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

// Reads a u64 at `at`, advancing it; false when the bytes end first.
bool get_u64(std::string_view bytes, size_t& at, uint64_t& v) {
  if (bytes.size() - at < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(bytes[at + size_t(i)])) << (8 * i);
  at += 8;
  return true;
}

std::string hex64(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

// pid, a per-process random number and a counter: unique among the processes and threads
// writing one directory, so no two writers ever share a temp file.
std::string temp_suffix() {
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ uint64_t(rd());
  }();
  static std::atomic<uint64_t> counter{0};
  std::ostringstream s;
  s << ".tmp." << ::getpid() << "." << counter.fetch_add(1) << "." << hex64(nonce);
  return s.str();
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string encode_entry(const std::string& key, const std::string& binary) {
  std::string out;
  out.reserve(kMagic.size() + 24 + key.size() + binary.size());
  out.append(kMagic);
  put_u64(out, key.size());
  out.append(key);
  put_u64(out, binary.size());
  put_u64(out, fnv1a64(binary));
  out.append(binary);
  return out;
}

std::optional<std::string> decode_entry(std::string_view bytes, const std::string& key) {
  if (bytes.substr(0, kMagic.size()) != kMagic) return std::nullopt;
  size_t at = kMagic.size();
  uint64_t key_len = 0, bin_len = 0, sum = 0;
  if (!get_u64(bytes, at, key_len) || key_len != key.size() || bytes.size() - at < key_len)
    return std::nullopt;
  if (bytes.substr(at, key_len) != key) return std::nullopt;
  at += key_len;
  if (!get_u64(bytes, at, bin_len) || !get_u64(bytes, at, sum)) return std::nullopt;
  // Exactly the binary follows: a truncated or extended file is damaged.
  if (bytes.size() - at != bin_len) return std::nullopt;
  const std::string_view binary = bytes.substr(at);
  if (fnv1a64(binary) != sum) return std::nullopt;
  return std::string(binary);
}

DiskStore::DiskStore(std::string dir, int64_t max_bytes, uid_t owner)
    : dir_(std::move(dir)),
      max_bytes_(max_bytes),
      owner_(owner == uid_t(-1) ? ::geteuid() : owner) {}

std::string DiskStore::path_of(const std::string& key) const {
  return (fs::path(dir_) / (hex64(fnv1a64(key)) + ".dlkc")).string();
}

std::string DiskStore::refusal() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return refusal_;
}

int DiskStore::open_dir(bool create, bool* refused) const {
  if (create) {
    // Each missing level made private; existing ones are left as they are.
    fs::path at;
    for (const fs::path& part : fs::path(dir_)) {
      at /= part;
      if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) return -1;
    }
  }
  // Checked through the open descriptor, and every file then opened relative to it: what
  // was checked is what is used, whatever is renamed meanwhile.
  const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    why = "not a directory";
  } else if (st.st_uid != owner_) {
    why = "owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
          std::to_string(owner_) + "): another user could supply its GPU code";
  } else if ((st.st_mode & 077) != 0 && ::fchmod(fd, 0700) != 0) {
    // Ours but open to others (an older driftless made it 0755): made private, or refused.
    why = "open to other users and its mode cannot be set to 0700";
  }
  if (why.empty()) return fd;
  ::close(fd);
  if (refused) *refused = true;
  std::lock_guard<std::mutex> lock(mutex_);
  refusal_ = why;
  return -1;
}

namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A file of the cache that may be trusted: a regular file of `owner` that nobody else may
// write.
bool trusted(const struct stat& st, uid_t owner) {
  return S_ISREG(st.st_mode) && st.st_uid == owner && (st.st_mode & 022) == 0;
}

}  // namespace

DiskRead DiskStore::read(const std::string& key, std::string& binary) const {
  bool refused = false;
  const Fd dir{open_dir(false, &refused)};
  if (dir.fd < 0) return refused ? DiskRead::bad : DiskRead::absent;
  const std::string name = fs::path(path_of(key)).filename().string();
  // O_NONBLOCK: a FIFO planted under the name must not hang the open.
  const Fd f{::openat(dir.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return errno == ENOENT ? DiskRead::absent : DiskRead::bad;
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !trusted(st, owner_)) return DiskRead::bad;
  std::string bytes(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(f.fd, bytes.data() + got, bytes.size() - got);
    if (n <= 0) return DiskRead::bad;
    got += size_t(n);
  }
  std::optional<std::string> decoded = decode_entry(bytes, key);
  if (!decoded) return DiskRead::bad;
  ::futimens(f.fd, nullptr);  // recently used: evicted last
  binary = std::move(*decoded);
  return DiskRead::ok;
}

bool DiskStore::write(const std::string& key, const std::string& binary) const {
  try {
    const Fd dir{open_dir(true)};
    if (dir.fd < 0) return false;
    const std::string name = fs::path(path_of(key)).filename().string();
    const std::string temp = name + temp_suffix();
    bool ok = false;
    {
      const Fd out{::openat(dir.fd, temp.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
      if (out.fd < 0) return false;
      const std::string bytes = encode_entry(key, binary);
      size_t put = 0;
      while (put < bytes.size()) {
        const ssize_t n = ::write(out.fd, bytes.data() + put, bytes.size() - put);
        if (n <= 0) break;
        put += size_t(n);
      }
      ok = put == bytes.size();
    }
    if (ok) ok = ::renameat(dir.fd, temp.c_str(), dir.fd, name.c_str()) == 0;
    if (!ok) ::unlinkat(dir.fd, temp.c_str(), 0);
    if (ok) maintain(dir.fd, name);
    return ok;
  } catch (...) {  // bad_alloc: the run goes on without the file
    return false;
  }
}

void DiskStore::maintain(int dir_fd, const std::string& keep) const {
  const int fd = ::dup(dir_fd);
  if (fd < 0) return;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return;
  }
  struct Entry {
    std::string name;
    int64_t bytes;
    struct timespec mtime;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  const time_t now = ::time(nullptr);
  while (const struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != owner_)
      continue;
    const size_t tmp = name.find(".dlkc.tmp.");
    if (tmp != std::string::npos) {
      // <hash>.dlkc.tmp.<pid>.<counter>.<nonce>: a writer that no longer runs, or one older
      // than any write takes, was killed before its rename.
      const long pid = std::strtol(name.c_str() + tmp + 10, nullptr, 10);
      const bool gone = pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
      if (gone || now - st.st_mtime > kStaleTempSeconds) ::unlinkat(dir_fd, name.c_str(), 0);
      continue;
    }
    if (name.size() != 16 + 5 || name.substr(16) != ".dlkc") continue;
    entries.push_back({name, int64_t(st.st_size), st.st_mtim});
    total += int64_t(st.st_size);
  }
  ::closedir(d);
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec
                                            : a.mtime.tv_nsec < b.mtime.tv_nsec;
  });
  for (const Entry& e : entries) {
    if (total <= max_bytes_) break;
    if (e.name == keep) continue;  // the entry just written stays
    if (::unlinkat(dir_fd, e.name.c_str(), 0) == 0) {
      total -= e.bytes;
      evictions_.fetch_add(1);
    }
  }
}

}  // namespace driftless::layers::jit
