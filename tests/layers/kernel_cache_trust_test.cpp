// The kernel cache's directory as a trust boundary (layers/attention/jit/disk_store.h): made
// private (0700, files 0600), never read when another user owns it or its files or when
// others may write them, a FIFO under an entry's name read without hanging, bounded in bytes
// with the least recently used evicted, and killed writers' temp files removed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "layers/attention/jit/disk_store.h"
#include "layers/attention/jit/kernel_cache.h"
#include "tests/test_paths.h"

namespace driftless::layers::jit {
namespace {

namespace fs = std::filesystem;

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// File timestamps are as coarse as the kernel's clock tick: apart by more than that.
void tick() {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
}

TEST(KernelCacheTrust, TheDirectoryAndItsFilesArePrivate) {
  const std::string scratch = testing::scratch_dir(), dir = scratch + "/cache/driftless/kernels";
  const DiskStore store(dir);
  ASSERT_TRUE(store.write("k", "bin"));
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(scratch + "/cache/driftless"), 0700u);
  EXPECT_EQ(mode_of(store.path_of("k")), 0600u);
  std::string bin;
  EXPECT_EQ(store.read("k", bin), DiskRead::ok);
  EXPECT_EQ(bin, "bin");
  // A directory an older driftless left open (0755) is made private on use.
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  EXPECT_EQ(store.read("k", bin), DiskRead::ok);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(store.refusal(), "");
}

TEST(KernelCacheTrust, ADirectoryOfAnotherUserIsNeitherReadNorWritten) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  ASSERT_TRUE(DiskStore(dir).write("k", "bin"));
  // The same directory, for a process of another uid: refused, with the reason.
  const DiskStore other(dir, int64_t(1) << 30, ::geteuid() + 4242);
  std::string bin;
  EXPECT_EQ(other.read("k", bin), DiskRead::bad);
  EXPECT_EQ(bin, "");
  EXPECT_FALSE(other.write("k2", "bin2"));
  EXPECT_NE(other.refusal().find("owned by uid"), std::string::npos) << other.refusal();
  EXPECT_FALSE(fs::exists(other.path_of("k2")));
  // Through the cache, where this process can give the directory away (as root): compiled,
  // never read, and named once on stderr.
  if (::chown(dir.c_str(), ::geteuid() + 4242, uid_t(-1)) != 0)
    GTEST_SKIP() << "cannot chown here (not root): the cache-level half needs it";
  KernelCache cache({4, dir});
  int compiles = 0;
  ::testing::internal::CaptureStderr();
  auto load = [](const std::string& b) -> Loaded { return std::make_shared<std::string>(b); };
  const Loaded l = cache.get(
      "k",
      [&] {
        ++compiles;
        return std::string("fresh");
      },
      load);
  cache.get(
      "k3",
      [&] {
        ++compiles;
        return std::string("fresh3");
      },
      load);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(*static_cast<const std::string*>(l.get()), "fresh");
  EXPECT_EQ(compiles, 2);
  EXPECT_EQ(cache.stats().disk_hits, 0);
  EXPECT_NE(err.find("not using the kernel cache directory"), std::string::npos) << err;
  EXPECT_EQ(err.find("not using", err.find("not using") + 1), std::string::npos) << err;
}

TEST(KernelCacheTrust, FilesOthersOwnOrMayWriteAreNotRead) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  const DiskStore store(dir);
  ASSERT_TRUE(store.write("k", "bin"));
  std::string bin;
  ASSERT_EQ(::chmod(store.path_of("k").c_str(), 0666), 0);
  EXPECT_EQ(store.read("k", bin), DiskRead::bad);
  ASSERT_EQ(::chmod(store.path_of("k").c_str(), 0600), 0);
  EXPECT_EQ(store.read("k", bin), DiskRead::ok);
  if (::chown(store.path_of("k").c_str(), ::geteuid() + 4242, uid_t(-1)) == 0)
    EXPECT_EQ(store.read("k", bin), DiskRead::bad);
  // A symlink under the entry's name is not followed.
  fs::remove(store.path_of("k"));
  write_file(dir + "/elsewhere", "");
  fs::create_symlink(dir + "/elsewhere", store.path_of("k"));
  EXPECT_EQ(store.read("k", bin), DiskRead::bad);
}

TEST(KernelCacheTrust, AFifoUnderAnEntrysNameDoesNotHang) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  const DiskStore store(dir);
  ASSERT_TRUE(store.write("other", "bin"));
  ASSERT_EQ(::mkfifo(store.path_of("k").c_str(), 0600), 0);
  std::string bin;
  EXPECT_EQ(store.read("k", bin), DiskRead::bad);  // returns: no writer is waited for
  EXPECT_TRUE(store.write("k", "bin"));            // and the entry replaces it
  EXPECT_EQ(store.read("k", bin), DiskRead::ok);
}

TEST(KernelCacheTrust, TheDirectoryIsBoundedWithTheLeastRecentlyUsedEvicted) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  const std::string binary(1000, 'x');
  const int64_t entry = int64_t(encode_entry("k0", binary).size());
  const DiskStore store(dir, 3 * entry);
  for (const char* k : {"k0", "k1", "k2"}) {
    ASSERT_TRUE(store.write(k, binary));
    tick();
  }
  std::string bin;
  ASSERT_EQ(store.read("k0", bin), DiskRead::ok);  // now the most recently used
  tick();
  ASSERT_TRUE(store.write("k3", binary));
  EXPECT_EQ(store.evictions(), 1);
  EXPECT_EQ(store.read("k1", bin), DiskRead::absent);  // the least recently used went
  for (const char* k : {"k0", "k2", "k3"}) EXPECT_EQ(store.read(k, bin), DiskRead::ok) << k;
  for (int i = 4; i < 20; ++i) ASSERT_TRUE(store.write("k" + std::to_string(i), binary));
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) total += int64_t(e.file_size());
  EXPECT_LE(total, 3 * entry);
  EXPECT_EQ(store.read("k19", bin), DiskRead::ok);
  // One entry larger than the bound is kept alone rather than written and removed at once.
  const DiskStore tiny(dir, 10);
  ASSERT_TRUE(tiny.write("big", binary));
  EXPECT_EQ(tiny.read("big", bin), DiskRead::ok);
}

TEST(KernelCacheTrust, KilledWritersTempFilesAreRemoved) {
  const std::string dir = testing::scratch_dir() + "/kernels";
  const DiskStore store(dir);
  ASSERT_TRUE(store.write("first", "bin"));
  // A writer that is gone: a child that exited.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = dir + "/0123456789abcdef.dlkc.tmp." + std::to_string(child) + ".0.ff";
  const std::string live =
      dir + "/0123456789abcdef.dlkc.tmp." + std::to_string(::getpid()) + ".7.ff";
  const std::string old =
      dir + "/0123456789abcdef.dlkc.tmp." + std::to_string(::getpid()) + ".8.ff";
  for (const auto& p : {dead, live, old}) write_file(p, "partial");
  const struct timespec times[2] = {{::time(nullptr) - 2 * kStaleTempSeconds, 0},
                                    {::time(nullptr) - 2 * kStaleTempSeconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old.c_str(), times, 0), 0);
  ASSERT_TRUE(store.write("second", "bin"));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_TRUE(fs::exists(live));  // a writer still running keeps its file
}

}  // namespace
}  // namespace driftless::layers::jit
