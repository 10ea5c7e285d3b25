// The cache of run-time compiled kernels (layers/attention/jit/kernel_cache.h) with a fake
// compiler: the bound and LRU order in memory, a restarted run served from disk, damaged and
// foreign files never returned, unwritable directories, and threads and "ranks" sharing it.
#include "layers/attention/jit/kernel_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "layers/attention/jit/disk_store.h"
#include "tests/test_paths.h"

namespace driftless::layers::jit {
namespace {

namespace fs = std::filesystem;

// A compiler that turns key into "bin:" + key and counts its calls per key; a loader that
// wraps the binary in a string.
struct FakeCompiler {
  std::mutex mutex;
  std::map<std::string, int> calls;
  int total = 0;
  std::chrono::milliseconds delay{0};  // how long a compile takes

  std::function<std::string()> compile(const std::string& key) {
    return [this, key] {
      std::this_thread::sleep_for(delay);
      std::lock_guard<std::mutex> lock(mutex);
      ++calls[key];
      ++total;
      return "bin:" + key;
    };
  }
};

Loaded load_string(const std::string& binary) {
  return std::make_shared<std::string>(binary);
}

std::string text(const Loaded& l) {
  return *static_cast<const std::string*>(l.get());
}

Loaded get(KernelCache& cache, FakeCompiler& fc, const std::string& key) {
  return cache.get(key, fc.compile(key), load_string);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The names of the files in dir.
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// Every file in dir is a finished cache file (no temp file left behind), n of them.
void expect_only_cache_files(const std::string& dir, size_t n) {
  const auto names = files_in(dir);
  for (const auto& name : names)
    EXPECT_TRUE(name.size() == 16 + 5 && name.ends_with(".dlkc")) << "stray file " << name;
  EXPECT_EQ(names.size(), n);
}

TEST(KernelCache, RefusesACapacityBelowOne) {
  EXPECT_THROW(KernelCache(KernelCacheOptions{0, ""}), std::invalid_argument);
  EXPECT_THROW(KernelCache(KernelCacheOptions{-3, ""}), std::invalid_argument);
  EXPECT_NO_THROW(KernelCache(KernelCacheOptions{1, ""}));
}

TEST(KernelCache, AHitReturnsTheSameLoadedWithoutCompiling) {
  KernelCache cache({4, ""});
  FakeCompiler fc;
  const Loaded a = get(cache, fc, "kernel a");
  const Loaded again = get(cache, fc, "kernel a");
  EXPECT_EQ(a.get(), again.get());
  EXPECT_EQ(text(a), "bin:kernel a");
  EXPECT_EQ(fc.total, 1);
  const KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.disk_hits, 0);
}

TEST(KernelCache, KeysDifferingInOneCharacterNeverShareAnEntry) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  FakeCompiler fc;
  {
    KernelCache cache({8, dir});
    EXPECT_EQ(text(get(cache, fc, "score * 0.5; sm_90")), "bin:score * 0.5; sm_90");
    EXPECT_EQ(text(get(cache, fc, "score * 0.5; sm_80")), "bin:score * 0.5; sm_80");
    EXPECT_EQ(fc.total, 2);
  }
  // A restarted run that has only the first on disk compiles the second.
  fs::remove(DiskStore(dir).path_of("score * 0.5; sm_80"));
  KernelCache restarted({8, dir});
  EXPECT_EQ(text(get(restarted, fc, "score * 0.5; sm_80")), "bin:score * 0.5; sm_80");
  EXPECT_EQ(text(get(restarted, fc, "score * 0.5; sm_90")), "bin:score * 0.5; sm_90");
  EXPECT_EQ(restarted.stats().compiles, 1);
  EXPECT_EQ(restarted.stats().disk_hits, 1);
  EXPECT_EQ(fc.calls["score * 0.5; sm_80"], 2);
}

TEST(KernelCache, SizeNeverExceedsCapacityAndEvictionsAreCounted) {
  KernelCache cache({8, ""});
  FakeCompiler fc;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i);
    EXPECT_EQ(text(get(cache, fc, key)), "bin:" + key);
    ASSERT_LE(cache.size(), 8);
  }
  EXPECT_EQ(cache.size(), 8);
  EXPECT_EQ(cache.stats().evictions, 192);
  EXPECT_EQ(cache.stats().compiles, 200);
  // The newest 8 are held; the oldest is gone.
  get(cache, fc, "k199");
  EXPECT_EQ(cache.stats().hits, 1);
  get(cache, fc, "k0");
  EXPECT_EQ(fc.calls["k0"], 2);
}

TEST(KernelCache, EvictsTheLeastRecentlyUsed) {
  KernelCache cache({3, ""});
  FakeCompiler fc;
  get(cache, fc, "a");
  get(cache, fc, "b");
  get(cache, fc, "c");
  get(cache, fc, "a");  // a is now the most recent: b is the least
  get(cache, fc, "d");  // evicts b
  EXPECT_EQ(cache.stats().evictions, 1);
  get(cache, fc, "a");
  get(cache, fc, "c");
  EXPECT_EQ(fc.calls["a"], 1);
  EXPECT_EQ(fc.calls["c"], 1);
  get(cache, fc, "b");  // compiled again, evicting d (a and c were touched after it)
  EXPECT_EQ(fc.calls["b"], 2);
  get(cache, fc, "a");
  get(cache, fc, "c");
  EXPECT_EQ(fc.total, 5);
  get(cache, fc, "d");
  EXPECT_EQ(fc.calls["d"], 2);
}

TEST(KernelCache, ARestartedRunCompilesNothing) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  FakeCompiler first;
  {
    KernelCache cache({4, dir});  // fewer than the keys: the disk holds evicted ones too
    for (int i = 0; i < 20; ++i) get(cache, first, "key " + std::to_string(i));
    EXPECT_EQ(cache.stats().compiles, 20);
    EXPECT_EQ(cache.stats().disk_errors, 0);
  }
  expect_only_cache_files(dir, 20);
  FakeCompiler second;
  KernelCache restarted({64, dir});
  for (int i = 0; i < 20; ++i) {
    const std::string key = "key " + std::to_string(i);
    EXPECT_EQ(text(get(restarted, second, key)), "bin:" + key);
  }
  const KernelCacheStats s = restarted.stats();
  EXPECT_EQ(second.total, 0);
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.misses, 20);
  EXPECT_EQ(s.disk_hits, 20);
  EXPECT_EQ(s.disk_errors, 0);
}

TEST(KernelCache, DamagedOrForeignFilesAreRecompiledNeverReturned) {
  const std::string key = "expr: score - abs(q - k); sm_90; nvrtc 12.4";
  const std::map<std::string, std::function<std::string(const std::string&)>> damage = {
      {"truncated", [](const std::string& b) { return b.substr(0, b.size() - 3); }},
      {"cut in the header", [](const std::string& b) { return b.substr(0, 9); }},
      {"empty", [](const std::string&) { return std::string(); }},
      {"binary byte flipped",
       [](const std::string& b) {
         std::string s = b;
         s.back() = char(s.back() ^ 0x01);
         return s;
       }},
      {"bytes appended", [](const std::string& b) { return b + "xx"; }},
      {"bad magic", [](const std::string& b) { return "DLKC2" + b.substr(5); }},
      {"another key under this name",
       [key](const std::string&) { return encode_entry(key + " ", "bin:another"); }},
  };
  for (const auto& [what, corrupt] : damage) {
    SCOPED_TRACE(what);
    const std::string dir = testing::scratch_dir() + "/kernels";
    const std::string path = DiskStore(dir).path_of(key);
    FakeCompiler fc;
    {
      KernelCache writer({4, dir});
      get(writer, fc, key);
    }
    write_file(path, corrupt(read_file(path)));
    KernelCache reader({4, dir});
    EXPECT_EQ(text(get(reader, fc, key)), "bin:" + key);
    EXPECT_EQ(reader.stats().disk_errors, 1);
    EXPECT_EQ(reader.stats().disk_hits, 0);
    EXPECT_EQ(reader.stats().compiles, 1);
    // The recompiled kernel replaced the file: the next run reads it.
    KernelCache next({4, dir});
    EXPECT_EQ(text(get(next, fc, key)), "bin:" + key);
    EXPECT_EQ(next.stats().disk_hits, 1);
    EXPECT_EQ(next.stats().disk_errors, 0);
    expect_only_cache_files(dir, 1);
  }
}

TEST(KernelCache, AStoredBinaryThatNoLongerLoadsIsCompiledAgain) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  FakeCompiler fc;
  {
    KernelCache writer({4, dir});
    get(writer, fc, "k");
  }
  KernelCache reader({4, dir});
  int loads = 0;
  const Loaded l = reader.get("k", fc.compile("k"), [&](const std::string& b) {
    if (loads++ == 0) throw std::runtime_error("CUDA_ERROR_INVALID_PTX");
    return load_string(b);
  });
  EXPECT_EQ(text(l), "bin:k");
  EXPECT_EQ(reader.stats().disk_errors, 1);
  EXPECT_EQ(reader.stats().compiles, 1);
}

TEST(KernelCache, AnUnwritableDirectoryStillReturnsKernels) {
  const std::string file = testing::scratch_dir() + "/a_file";
  write_file(file, "not a directory");
  KernelCache cache({4, file + "/kernels"});
  FakeCompiler fc;
  EXPECT_EQ(text(get(cache, fc, "a")), "bin:a");
  EXPECT_EQ(text(get(cache, fc, "b")), "bin:b");
  EXPECT_EQ(text(get(cache, fc, "a")), "bin:a");
  const KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.disk_errors, 2);  // the two failed writes
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(read_file(file), "not a directory");
}

TEST(KernelCache, CreatesItsDirectoryOnTheFirstWrite) {
  const std::string dir = testing::scratch_dir() + "/a/b/kernels";
  KernelCache cache({4, dir});
  EXPECT_FALSE(fs::exists(dir));
  FakeCompiler fc;
  get(cache, fc, "a");
  EXPECT_EQ(cache.stats().disk_errors, 0);
  expect_only_cache_files(dir, 1);
}

TEST(KernelCache, AThrowingCompileOrLoadLeavesNothingCached) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  KernelCache cache({4, dir});
  EXPECT_THROW(
      cache.get(
          "k", []() -> std::string { throw std::runtime_error("nvrtc: error"); }, load_string),
      std::runtime_error);
  EXPECT_THROW(cache.get(
                   "k", [] { return std::string("bin:k"); },
                   [](const std::string&) -> Loaded { throw std::runtime_error("no module"); }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(cache.stats().compiles, 1);  // the second compiled, then failed to load
  EXPECT_FALSE(fs::exists(DiskStore(dir).path_of("k")));  // a binary that failed to load
  FakeCompiler fc;
  EXPECT_EQ(text(get(cache, fc, "k")), "bin:k");
  EXPECT_EQ(fc.total, 1);
  EXPECT_EQ(cache.size(), 1);
  expect_only_cache_files(dir, 1);
}

TEST(KernelCache, ConcurrentGetsCompileEachKeyOncePerProcess) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  KernelCache cache({64, dir});
  FakeCompiler fc;
  fc.delay = std::chrono::milliseconds(2);  // compiles overlap: threads meet on a key in flight
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (int i = 0; i < 10; ++i) {
          // 10 keys every thread asks for, and 5 of its own.
          const std::string shared = "shared " + std::to_string(i);
          const std::string own = "own " + std::to_string(t) + "." + std::to_string(i % 5);
          if (text(get(cache, fc, shared)) != "bin:" + shared) ++wrong;
          if (text(get(cache, fc, own)) != "bin:" + own) ++wrong;
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fc.calls.size(), 10u + 8u * 5u);
  for (const auto& [key, n] : fc.calls) EXPECT_EQ(n, 1) << key;
  const KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.compiles, 50);
  EXPECT_EQ(s.hits + s.misses, 8 * 20 * 10 * 2);
  EXPECT_EQ(cache.size(), 50);
  expect_only_cache_files(dir, 50);
}

TEST(KernelCache, ConcurrentGetsUnderEvictionReturnTheRightKernels) {
  KernelCache cache({3, ""});
  FakeCompiler fc;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const std::string key = "k" + std::to_string((i * 7 + t) % 11);
        if (text(get(cache, fc, key)) != "bin:" + key) ++wrong;
        if (cache.size() > 3) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.size(), 3);
  const KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, 8 * 300);
  EXPECT_EQ(s.compiles, s.misses);
  EXPECT_EQ(s.evictions, s.compiles - cache.size());
}

TEST(KernelCache, TwoRanksWritingTheSameKeysLeaveValidFiles) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  KernelCache rank0({4, dir}), rank1({4, dir});
  FakeCompiler fc0, fc1;
  std::thread t0([&] {
    for (int i = 0; i < 40; ++i) get(rank0, fc0, "key " + std::to_string(i));
  });
  std::thread t1([&] {
    for (int i = 0; i < 40; ++i) get(rank1, fc1, "key " + std::to_string(i));
  });
  t0.join();
  t1.join();
  EXPECT_EQ(rank0.stats().disk_errors + rank1.stats().disk_errors, 0);
  expect_only_cache_files(dir, 40);
  FakeCompiler fc;
  KernelCache next({64, dir});
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(text(get(next, fc, "key " + std::to_string(i))), "bin:key " + std::to_string(i));
  EXPECT_EQ(next.stats().disk_hits, 40);
  EXPECT_EQ(fc.total, 0);
}

TEST(KernelCache, ReadersNeverSeeAPartialFile) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  const std::string key = "one key", big(1 << 18, 'x');
  const DiskStore store(dir);
  ASSERT_TRUE(store.write(key, big));
  std::atomic<bool> done{false};
  std::atomic<int> written{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i)
        if (store.write(key, big.substr(0, big.size() - size_t(t)))) ++written;
    });
  int reads = 0, bad = 0;
  std::thread reader([&] {
    do {
      std::string binary;
      const DiskRead r = store.read(key, binary);
      ++reads;
      if (r != DiskRead::ok || binary.substr(0, 1000) != big.substr(0, 1000)) ++bad;
    } while (!done);
  });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(written.load(), 200);
  EXPECT_GT(reads, 0);
  EXPECT_EQ(bad, 0);
  expect_only_cache_files(dir, 1);
}

TEST(KernelCacheFile, RoundTripsAnyBytesAndChecksTheKey) {
  const std::string binary("\0\x01\xff\n DLKC1 \0", 13);
  const std::string key("k\0ey", 4);
  const std::string bytes = encode_entry(key, binary);
  EXPECT_EQ(bytes.substr(0, 5), "DLKC1");
  EXPECT_EQ(decode_entry(bytes, key).value_or("none"), binary);
  EXPECT_FALSE(decode_entry(bytes, std::string("k\0ez", 4)).has_value());
  EXPECT_FALSE(decode_entry(bytes, "k").has_value());
  EXPECT_EQ(decode_entry(encode_entry("k", ""), "k").value_or("none"), "");
  // Names differ for keys one character apart, and are stable hex.
  const DiskStore store("/d");
  EXPECT_NE(store.path_of("score_90"), store.path_of("score_80"));
  EXPECT_EQ(store.path_of("a"), store.path_of("a"));
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
}

TEST(KernelCache, DefaultDirFollowsTheEnvironment) {
  auto saved = [](const char* n) {
    const char* v = std::getenv(n);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const auto k = saved("DRIFTLESS_KERNEL_CACHE"), x = saved("XDG_CACHE_HOME"), h = saved("HOME");
  setenv("DRIFTLESS_KERNEL_CACHE", "/tmp/kc", 1);
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(default_cache_dir(), "/tmp/kc");
  unsetenv("DRIFTLESS_KERNEL_CACHE");
  EXPECT_EQ(default_cache_dir(), "/xdg/driftless/kernels");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_dir(), "/home/u/.cache/driftless/kernels");
  unsetenv("HOME");
  EXPECT_EQ(default_cache_dir(), "");
  auto restore = [](const char* n, const std::optional<std::string>& v) {
    if (v)
      setenv(n, v->c_str(), 1);
    else
      unsetenv(n);
  };
  restore("DRIFTLESS_KERNEL_CACHE", k);
  restore("XDG_CACHE_HOME", x);
  restore("HOME", h);
}

TEST(KernelCache, TheProcessCacheTakesItsConfiguredOptions) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  configure_process_kernel_cache({2, dir});
  EXPECT_EQ(process_kernel_cache().options().capacity, 2);
  EXPECT_EQ(process_kernel_cache().options().dir, dir);
  FakeCompiler fc;
  get(process_kernel_cache(), fc, "a");
  configure_process_kernel_cache({2, dir});  // the same options keep the loaded kernels
  EXPECT_EQ(process_kernel_cache().size(), 1);
  EXPECT_THROW(configure_process_kernel_cache({0, dir}), std::invalid_argument);
  EXPECT_EQ(process_kernel_cache().size(), 1);
  configure_process_kernel_cache({5, ""});
  EXPECT_EQ(process_kernel_cache().size(), 0);
  EXPECT_EQ(process_kernel_cache().options().capacity, 5);
  EXPECT_EQ(process_kernel_cache().options().dir, "");
}

}  // namespace
}  // namespace driftless::layers::jit
