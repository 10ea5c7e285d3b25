// KernelCache (kernel_cache.h): an LRU of loaded kernels over the disk store (disk_store.h).
// A key being fetched is marked in flight, so its compile runs once however many threads
// ask, while other keys compile in parallel: no compile or disk access holds the lock.
#include "layers/attention/jit/kernel_cache.h"

#include <cstdio>
#include <cstdlib>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "engine/core/env.h"
#include "layers/attention/jit/disk_store.h"

namespace driftless::layers::jit {

namespace {

struct Entry {
  KernelKey key;
  Loaded loaded;
};

struct KeyHash {
  size_t operator()(const KernelKey& k) const { return k.hash(); }
};

}  // namespace

struct KernelCache::Impl {
  KernelCacheOptions options;
  std::optional<DiskStore> disk;
  mutable std::mutex mutex;
  KernelCacheStats stats;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<KernelKey, std::list<Entry>::iterator, KeyHash> index;
  std::unordered_map<KernelKey, std::shared_future<Loaded>, KeyHash> in_flight;

  void count(int64_t KernelCacheStats::*counter) {
    std::lock_guard<std::mutex> lock(mutex);
    ++(stats.*counter);
  }

  // From disk, else compiled (and then written): the loaded kernel of a key not in memory.
  Loaded fetch(const KernelKey& key, const std::function<std::string()>& compile,
               const std::function<Loaded(const std::string&)>& load) {
    if (disk) {
      std::string binary;
      const DiskRead r = disk->read(key.text(), binary);
      if (r == DiskRead::ok) {
        // A stored binary that no longer loads (another driver) is a damaged entry: compiled
        // again and overwritten, instead of failing the run.
        try {
          Loaded loaded = load(binary);
          count(&KernelCacheStats::disk_hits);
          return loaded;
        } catch (...) {
          count(&KernelCacheStats::disk_errors);
        }
      } else if (r == DiskRead::bad) {
        count(&KernelCacheStats::disk_errors);
        warn_refused();
      }
    }
    const std::string binary = compile();
    count(&KernelCacheStats::compiles);
    Loaded loaded = load(binary);  // only a binary that loads is kept on disk
    if (disk && !disk->write(key.text(), binary)) {
      count(&KernelCacheStats::disk_errors);
      warn_refused();
    }
    return loaded;
  }

  // Once per cache: a directory refused for its owner or mode is named on stderr (the run
  // goes on, compiling what it would have read).
  std::once_flag warned;
  void warn_refused() {
    const std::string why = disk->refusal();
    if (why.empty()) return;
    std::call_once(warned, [&] {
      std::fprintf(stderr,
                   "[kernel_cache] not using the kernel cache directory %s: %s; kernels are "
                   "compiled without it\n",
                   options.dir.c_str(), why.c_str());
    });
  }

  // Under the lock: `key` becomes the most recent entry; the least recent beyond capacity go.
  void insert(const KernelKey& key, const Loaded& loaded) {
    lru.push_front({key, loaded});
    index[key] = lru.begin();
    while (int64_t(lru.size()) > options.capacity) {
      index.erase(lru.back().key);
      lru.pop_back();
      ++stats.evictions;
    }
  }
};

KernelCache::KernelCache(KernelCacheOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.capacity < 1)
    throw std::invalid_argument("[kernel_cache] capacity must be at least 1 loaded kernel, got " +
                                std::to_string(options.capacity));
  impl_->options = std::move(options);
  if (!impl_->options.dir.empty())
    impl_->disk.emplace(impl_->options.dir, impl_->options.disk_bytes);
}

KernelCache::~KernelCache() = default;

KernelKey::KernelKey(std::string text)
    : text_(std::make_shared<const std::string>(std::move(text))),
      hash_(std::hash<std::string>{}(*text_)) {}

Loaded KernelCache::get(const KernelKey& key, const std::function<std::string()>& compile,
                        const std::function<Loaded(const std::string& binary)>& load) {
  Impl& m = *impl_;
  std::promise<Loaded> promise;
  {
    std::unique_lock<std::mutex> lock(m.mutex);
    if (auto it = m.index.find(key); it != m.index.end()) {
      ++m.stats.hits;
      m.lru.splice(m.lru.begin(), m.lru, it->second);
      return it->second->loaded;
    }
    if (auto it = m.in_flight.find(key); it != m.in_flight.end()) {
      // Another thread is fetching it: wait for that (its exception, if it fails).
      std::shared_future<Loaded> pending = it->second;
      lock.unlock();
      Loaded loaded = pending.get();
      m.count(&KernelCacheStats::hits);
      return loaded;
    }
    ++m.stats.misses;
    m.in_flight.emplace(key, promise.get_future().share());
  }
  try {
    Loaded loaded = m.fetch(key, compile, load);
    {
      std::lock_guard<std::mutex> lock(m.mutex);
      m.in_flight.erase(key);
      m.insert(key, loaded);
    }
    promise.set_value(loaded);
    return loaded;
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(m.mutex);
      m.in_flight.erase(key);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

KernelCacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  KernelCacheStats s = impl_->stats;
  if (impl_->disk) s.disk_evictions = impl_->disk->evictions();
  return s;
}

int64_t KernelCache::size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return int64_t(impl_->lru.size());
}

const KernelCacheOptions& KernelCache::options() const {
  return impl_->options;
}

std::string default_cache_dir() {
  auto env = [](const char* name) { return env_value(name); };
  if (std::string d = env("DRIFTLESS_KERNEL_CACHE"); !d.empty()) return d;
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/driftless/kernels";
  if (std::string d = env("HOME"); !d.empty()) return d + "/.cache/driftless/kernels";
  return "";
}

namespace {

std::mutex g_process_mutex;

std::unique_ptr<KernelCache>& process_cache_slot() {
  static std::unique_ptr<KernelCache> cache;
  return cache;
}

}  // namespace

KernelCache& process_kernel_cache() {
  std::lock_guard<std::mutex> lock(g_process_mutex);
  auto& cache = process_cache_slot();
  if (!cache) cache = std::make_unique<KernelCache>(KernelCacheOptions{64, default_cache_dir()});
  return *cache;
}

void configure_process_kernel_cache(const KernelCacheOptions& options) {
  auto replacement = std::make_unique<KernelCache>(options);  // refuses a bad capacity first
  std::lock_guard<std::mutex> lock(g_process_mutex);
  auto& cache = process_cache_slot();
  // The same options again (a second run in one process) keep the loaded kernels.
  if (cache && cache->options().capacity == options.capacity &&
      cache->options().dir == options.dir && cache->options().disk_bytes == options.disk_bytes)
    return;
  cache = std::move(replacement);
}

}  // namespace driftless::layers::jit
