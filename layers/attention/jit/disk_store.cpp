// The kernel cache's files (disk_store.h): their format, their checks on reading, and the
// temp-file-and-rename write that lets the ranks of one host share a directory.
#include "layers/attention/jit/disk_store.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

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

DiskStore::DiskStore(std::string dir) : dir_(std::move(dir)) {}

std::string DiskStore::path_of(const std::string& key) const {
  return (fs::path(dir_) / (hex64(fnv1a64(key)) + ".dlkc")).string();
}

DiskRead DiskStore::read(const std::string& key, std::string& binary) const {
  const std::string path = path_of(key);
  std::error_code ec;
  if (!fs::exists(fs::status(path, ec))) return DiskRead::absent;
  std::ifstream in(path, std::ios::binary);
  if (!in) return DiskRead::bad;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return DiskRead::bad;
  std::optional<std::string> decoded = decode_entry(bytes.view(), key);
  if (!decoded) return DiskRead::bad;
  binary = std::move(*decoded);
  return DiskRead::ok;
}

bool DiskStore::write(const std::string& key, const std::string& binary) const {
  try {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) return false;
    const std::string path = path_of(key), temp = path + temp_suffix();
    bool ok = false;
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      if (out) {
        const std::string bytes = encode_entry(key, binary);
        out.write(bytes.data(), std::streamsize(bytes.size()));
        out.flush();
        out.close();
        ok = !out.fail();
      }
    }
    if (ok) {
      fs::rename(temp, path, ec);
      ok = !ec;
    }
    if (!ok) fs::remove(temp, ec);
    return ok;
  } catch (...) {  // bad_alloc or a filesystem error: the run goes on without the file
    return false;
  }
}

}  // namespace driftless::layers::jit
