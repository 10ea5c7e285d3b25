// The on-disk half of the kernel cache (kernel_cache.h): one file per key, named by a hash of
// the key, holding the key itself and a checksum so that a foreign, truncated or damaged file
// reads as a miss, never as another key's binary; written to a temp file and renamed.
#pragma once
#include <cstdint>
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

class DiskStore {
 public:
  explicit DiskStore(std::string dir);

  // The file of `key`: dir/<16 hex digits of fnv1a64(key)>.dlkc.
  std::string path_of(const std::string& key) const;
  // absent: no file (a plain miss); bad: a file that is unreadable or does not hold exactly
  // `key` with an intact binary; ok: `binary` is set.
  DiskRead read(const std::string& key, std::string& binary) const;
  // Writes atomically (a unique temp file in dir, then a rename onto path_of(key)), creating
  // dir when needed; false when anything fails. Never throws, never leaves its temp file.
  bool write(const std::string& key, const std::string& binary) const;

 private:
  std::string dir_;
};

}  // namespace driftless::layers::jit
