// The bounded cache of run-time compiled attention kernels: in memory, the
// least recently used of at most `capacity` loaded kernels; on disk, the compiled binaries,
// shared by the ranks of one host through atomic writes, so a restarted run compiles nothing.
// Keyed only by text: the key is the full description of what was compiled (program text,
// options, architecture, compiler and driftless versions), never an address. The directory
// must be the user's own (disk_store.h); one of another user is not used, with a warning.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace driftless::layers::jit {

struct KernelCacheStats {
  int64_t hits = 0;            // found loaded in memory (or loaded meanwhile by another thread)
  int64_t misses = 0;          // not in memory: then read from disk or compiled
  int64_t disk_hits = 0;       // misses served by the on-disk cache
  int64_t compiles = 0;        // misses that compiled
  int64_t evictions = 0;       // loaded kernels dropped by the capacity bound
  int64_t disk_errors = 0;     // unreadable, truncated or foreign files ignored; failed writes
  int64_t disk_evictions = 0;  // files removed by the on-disk bound
};

struct KernelCacheOptions {
  int64_t capacity = 64;  // loaded kernels held in memory, >= 1
  std::string dir;        // on-disk cache directory; "" = memory only
  // The most the directory's files may hold; the least recently used beyond it are removed.
  int64_t disk_bytes = int64_t(1) << 30;
};

// A loaded kernel (on the GPU: the module and its functions); opaque to the cache.
using Loaded = std::shared_ptr<const void>;

// A cache key: its full text, hashed once. The text of an attention program (its source with
// every embedded header, ~150 KB) took ~25 us to hash on every launch; a caller that keeps
// its KernelKey pays that once. Two keys are equal exactly when their texts are (the shared
// text compared by address first: the same text object is the same text).
class KernelKey {
 public:
  explicit KernelKey(std::string text);
  const std::string& text() const { return *text_; }
  size_t hash() const { return hash_; }
  bool operator==(const KernelKey& o) const {
    return text_ == o.text_ || (hash_ == o.hash_ && *text_ == *o.text_);
  }

 private:
  std::shared_ptr<const std::string> text_;
  size_t hash_ = 0;
};

class KernelCache {
 public:
  explicit KernelCache(KernelCacheOptions options);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The loaded kernel of `key`: from memory; else from the disk cache (a file whose stored
  // key is not exactly `key` is a miss, never a hit); else compile() (the binary), written
  // to disk atomically. load() turns a binary into its Loaded. Thread-safe: threads asking
  // for one key wait for one compile; other keys compile meanwhile. An exception of
  // compile() or load() reaches the caller (and the threads waiting on that key) and leaves
  // nothing cached; a stored binary that load() refuses is a disk error, compiled again.
  Loaded get(const KernelKey& key, const std::function<std::string()>& compile,
             const std::function<Loaded(const std::string& binary)>& load);
  Loaded get(const std::string& key, const std::function<std::string()>& compile,
             const std::function<Loaded(const std::string& binary)>& load) {
    return get(KernelKey(key), compile, load);
  }

  KernelCacheStats stats() const;
  int64_t size() const;  // loaded kernels held now, <= capacity
  const KernelCacheOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// $DRIFTLESS_KERNEL_CACHE, else $XDG_CACHE_HOME/driftless/kernels, else
// $HOME/.cache/driftless/kernels, else "" (no disk cache).
std::string default_cache_dir();

// The process's cache, which the attention kernels use (capacity 64, default_cache_dir()
// until configured); configure() replaces it, unless its options are the same, and is called
// at start-up from the run config's attention.kernel_cache, before any kernel is fetched:
// a reference to the cache it replaces is no longer valid.
KernelCache& process_kernel_cache();
void configure_process_kernel_cache(const KernelCacheOptions& options);

}  // namespace driftless::layers::jit
