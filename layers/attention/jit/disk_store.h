// The on-disk half of the kernel cache (kernel_cache.h): one file per key, named by a hash of
// the key, holding the key itself and a checksum so that a foreign, truncated or damaged file
// reads as a miss, never as another key's binary; written to a temp file and renamed. The
// directory is the user's alone (0700, owned by them) and its files too (0600); a directory
// or file of anyone else is never read, and the directory is bounded in bytes.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace driftless::layers::jit {

// FNV-1a, 64 bits: the file name of a key and the checksum of a binary.
uint64_t fnv1a64(std::string_view bytes);

// The bytes of a cache file: "DLKC1", key length (u64 LE), key, binary length (u64 LE),
// fnv1a64(binary) (u64 LE), binary.
std::string encode_entry(const std::string& key, const std::string& binary);
// The binary of a cache file's bytes when they hold exactly `key` and an intact binary.
std::optional<std::string> decode_entry(std::string_view bytes, const std::string& key);

enum class DiskRead { absent, ok, bad };

// A temp file whose writer is gone (its pid no longer runs) or that is older than this is a
// killed writer's, removed by the next write.
constexpr int64_t kStaleTempSeconds = 3600;

class DiskStore {
 public:
  // max_bytes: the most the directory's cache files may hold; after a write the least
  // recently used (by modification time, which a read refreshes) are removed beyond it.
  // owner: the uid the directory and its files must belong to (the process's effective uid).
  explicit DiskStore(std::string dir, int64_t max_bytes = int64_t(1) << 30,
                     uid_t owner = uid_t(-1));

  // The file of `key`: dir/<16 hex digits of fnv1a64(key)>.dlkc.
  std::string path_of(const std::string& key) const;
  // absent: no file (a plain miss); bad: a file that is unreadable or does not hold exactly
  // `key` with an intact binary; ok: `binary` is set.
  DiskRead read(const std::string& key, std::string& binary) const;
  // Writes atomically (a unique temp file in dir, then a rename onto path_of(key)), creating
  // dir when needed; false when anything fails. Never throws, never leaves its temp file.
  // Then removes stale temp files and evicts beyond max_bytes.
  bool write(const std::string& key, const std::string& binary) const;

  // Why the directory was last refused ("" if never): owned by another user, or not a
  // directory. Such a directory is neither read nor written.
  std::string refusal() const;
  int64_t evictions() const { return evictions_.load(); }

 private:
  // The directory, opened and checked (created 0700 when `create`); -1 when absent (a plain
  // miss) or refused (`refused` set, refusal() says why).
  int open_dir(bool create, bool* refused = nullptr) const;
  void maintain(int dir_fd, const std::string& keep) const;

  std::string dir_;
  int64_t max_bytes_;
  uid_t owner_;
  mutable std::atomic<int64_t> evictions_{0};
  mutable std::mutex mutex_;  // guards refusal_
  mutable std::string refusal_;
};

}  // namespace driftless::layers::jit
