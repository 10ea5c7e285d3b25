// The run directory's lock and the rules for using it (run_directory.h).
#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>

#include "engine/core/error.h"
#include "train/checkpoint.h"

namespace driftless::train {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown host";
}

// What a finished or running run leaves: empty when the directory holds none of it.
std::string traces_of_a_run(const std::string& dir) {
  std::ostringstream os;
  std::error_code ec;
  const fs::path metrics = fs::path(dir) / "metrics.jsonl";
  if (fs::exists(metrics, ec) && fs::file_size(metrics, ec) > 0) os << "metrics.jsonl";
  const size_t n = list_checkpoints(dir).size();
  if (n > 0) os << (os.tellp() > 0 ? ", " : "") << n << " checkpoint" << (n > 1 ? "s" : "");
  const fs::path logs = fs::path(dir) / "tensor_logs";
  if (fs::is_directory(logs, ec) && !fs::is_empty(logs, ec))
    os << (os.tellp() > 0 ? ", " : "") << "tensor logs";
  return os.str();
}

void remove_or_fail(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  DL_CHECK(!ec, "train", "--overwrite: cannot remove " << p.string() << ": " << ec.message());
}

// `<name>.tmp.<pid>` files of checkpoint or log writes killed before their rename. Safe to
// remove: the lock says no other run writes here.
int remove_stale_temporaries(const std::string& dir) {
  const std::regex pattern(R"(.*\.tmp\.[0-9]+)");
  int removed = 0;
  for (const char* sub : {"checkpoints", "tensor_logs"}) {
    std::error_code ec;
    const fs::path folder = fs::path(dir) / sub;
    if (!fs::is_directory(folder, ec)) continue;
    for (const auto& e : fs::recursive_directory_iterator(folder, ec))
      if (e.is_regular_file(ec) && std::regex_match(e.path().filename().string(), pattern))
        removed += fs::remove(e.path(), ec) ? 1 : 0;
  }
  return removed;
}

}  // namespace

RunDirectory::RunDirectory(const std::string& dir, RunDirMode mode, std::ostream& log) : dir_(dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DL_CHECK(!ec && fs::is_directory(dir), "train",
           "cannot create the run directory "
               << dir << " (run.output_dir): " << (ec ? ec.message() : "it is not a directory"));
  const std::string lock_path = dir + "/.lock";
  lock_.fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  DL_CHECK(lock_.fd >= 0, "train",
           "cannot write in the run directory " << dir << " (" << lock_path
                                                << "): " << std::strerror(errno));
  if (::flock(lock_.fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    std::getline(std::ifstream(lock_path), holder);
    ::close(lock_.fd);
    lock_.fd = -1;
    DL_CHECK(err != EWOULDBLOCK, "train",
             "the run directory " << dir << " is in use by another run ("
                                  << (holder.empty() ? "lock " + lock_path : holder)
                                  << "); wait for it to end or choose another run.output_dir");
    DL_FAIL("train", "cannot lock " << lock_path << ": " << std::strerror(err));
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + host_name();
  if (::ftruncate(lock_.fd, 0) == 0 && ::write(lock_.fd, me.data(), me.size()) < 0) {
    // The holder's name is a courtesy for the message above; the lock itself holds.
  }

  const std::string traces = traces_of_a_run(dir);
  if (!traces.empty() && mode == RunDirMode::fresh)
    DL_FAIL("train", "the run directory " << dir << " already holds a run (" << traces
                                          << "); continue it with --resume, or start over "
                                             "with --overwrite (deletes them)");
  if (!traces.empty() && mode == RunDirMode::overwrite) {
    for (const char* name : {"metrics.jsonl", "checkpoints", "tensor_logs", "config.yaml"})
      remove_or_fail(fs::path(dir) / name);
    log << "--overwrite: removed the previous run's " << traces << " from " << dir << "\n";
  }
  if (const int n = remove_stale_temporaries(dir); n > 0)
    log << "removed " << n << " temporary file" << (n > 1 ? "s" : "")
        << " of interrupted writes from " << dir << "\n";

  // Found now rather than at the first checkpoint, maybe hours in.
  const fs::path checkpoints = fs::path(dir) / "checkpoints";
  fs::create_directories(checkpoints, ec);
  const fs::path probe = checkpoints / (".write_test." + std::to_string(::getpid()));
  const bool writable = !ec && std::ofstream(probe).good();
  fs::remove(probe, ec);
  DL_CHECK(writable, "train",
           "cannot write checkpoints in " << checkpoints.string() << ": "
                                          << (ec ? ec.message() : std::strerror(errno)));
}

RunDirectory::Descriptor::~Descriptor() {
  if (fd >= 0) ::close(fd);
}

}  // namespace driftless::train
