// The run directory's lock and the rules for using it (run_directory.h).
#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>

#include "engine/core/env.h"
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

// Directories no run may live in: the root, the system's own trees and the home directory
// itself (--overwrite and the run's files would mix with the system's or the user's).
void refuse_system_directory(const std::string& dir) {
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return;  // created below, where a failure is reported
  const std::string r = real.string();
  for (const char* system : {"/",      "/bin",  "/boot", "/dev", "/etc",  "/lib", "/lib32",
                             "/lib64", "/proc", "/root", "/run", "/sbin", "/srv", "/sys",
                             "/usr",   "/var",  "/home", "/tmp", "/opt",  "/mnt", "/media"})
    DL_CHECK(r != system, "train",
             "run.output_dir " << dir << " resolves to " << r
                               << ", a system directory; choose a directory of its own");
  for (const char* tree : {"/proc/", "/sys/", "/dev/", "/etc/", "/boot/", "/usr/", "/bin/",
                           "/sbin/", "/lib/", "/lib64/"})
    DL_CHECK(r.rfind(tree, 0) != 0, "train",
             "run.output_dir " << dir << " resolves to " << r << ", inside the system tree " << tree
                               << "; choose a directory of its own");
  if (const std::string home = env_value("HOME"); !home.empty()) {
    const fs::path h = fs::weakly_canonical(home, ec);
    DL_CHECK(ec || h != real, "train",
             "run.output_dir " << dir << " is the home directory " << r
                               << "; choose a directory of its own");
  }
}

// The files driftless writes in place in a run directory must be its own: a symbolic link,
// a FIFO or a hard-linked file under their names would make the run write into (or hang
// on) something it did not create. (checkpoints/ may be a link to another disk: files are
// renamed into it, never written through a name that exists.)
void refuse_foreign_entries(const std::string& dir) {
  for (const char* name : {"metrics.jsonl", "config.yaml"}) {
    const std::string p = dir + "/" + name;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    DL_CHECK(S_ISREG(st.st_mode) && st.st_nlink == 1, "train",
             "the run directory " << dir << " holds " << p << " as "
                                  << (S_ISLNK(st.st_mode)    ? "a symbolic link"
                                      : S_ISFIFO(st.st_mode) ? "a FIFO"
                                      : S_ISDIR(st.st_mode)  ? "a directory"
                                      : S_ISREG(st.st_mode)  ? "a file with other hard links"
                                                             : "a special file")
                                  << "; driftless writes a file of its own there: remove it or "
                                     "choose another run.output_dir");
  }
}

// --overwrite: removes what driftless writes, by name (metrics.jsonl, config.yaml, the
// checkpoints step_<N>.safetensors, tensor logs step_<N>.safetensors/.json, temporaries),
// and the folders once empty. Anything else stays; returns how many such files were kept.
int remove_previous_run(const std::string& dir) {
  const std::regex ours(
      R"(step_[0-9]{1,19}\.(safetensors|json)(\.tmp\.[0-9]+)?|\.write_test\.[0-9]+)");
  auto remove_or_fail = [](const fs::path& p) {
    std::error_code ec;
    fs::remove(p, ec);
    DL_CHECK(!ec, "train", "--overwrite: cannot remove " << p.string() << ": " << ec.message());
  };
  for (const char* name : {"metrics.jsonl", "config.yaml"}) remove_or_fail(fs::path(dir) / name);
  int kept = 0;
  for (const char* sub : {"checkpoints", "tensor_logs"}) {
    const fs::path folder = fs::path(dir) / sub;
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) continue;
    for (const auto& e : fs::directory_iterator(folder, ec)) {
      const fs::file_status st = e.symlink_status(ec);
      if ((fs::is_regular_file(st) || fs::is_symlink(st)) &&
          std::regex_match(e.path().filename().string(), ours))
        remove_or_fail(e.path());
      else
        ++kept;
    }
    if (!fs::is_symlink(folder, ec) && fs::is_empty(folder, ec)) fs::remove(folder, ec);
  }
  return kept;
}

// `<name>.tmp.<pid>` files of checkpoint or log writes killed before their rename. Safe to
// remove: the lock says no other run writes here.
int remove_stale_temporaries(const std::string& dir) {
  const std::regex pattern(R"(.*\.tmp\.[0-9]+)");
  int removed = 0;
  for (const char* sub : {"checkpoints", "tensor_logs"}) {
    std::error_code ec;
    const fs::path folder = fs::path(dir) / sub;
    if (!fs::is_directory(fs::symlink_status(folder, ec))) continue;
    for (const auto& e : fs::recursive_directory_iterator(folder, ec))
      if (e.symlink_status(ec).type() == fs::file_type::regular &&
          std::regex_match(e.path().filename().string(), pattern))
        removed += fs::remove(e.path(), ec) ? 1 : 0;
  }
  return removed;
}

}  // namespace

RunDirectory::RunDirectory(const std::string& dir, RunDirMode mode, std::ostream& log) : dir_(dir) {
  refuse_system_directory(dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  DL_CHECK(!ec && fs::is_directory(dir), "train",
           "cannot create the run directory "
               << dir << " (run.output_dir): " << (ec ? ec.message() : "it is not a directory"));
  const std::string lock_path = dir + "/.lock";
  // O_NOFOLLOW: a symbolic link named .lock is refused, not followed and truncated;
  // O_NONBLOCK: a FIFO named .lock is refused below, not waited on.
  lock_.fd =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  DL_CHECK(lock_.fd >= 0, "train",
           "cannot write in the run directory "
               << dir << " (" << lock_path << "): "
               << (errno == ELOOP ? "it is a symbolic link; remove it" : std::strerror(errno)));
  struct stat st {};
  DL_CHECK(::fstat(lock_.fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1, "train",
           "the run directory " << dir << " holds " << lock_path
                                << " as a special file or a file with other hard links; driftless "
                                   "writes its own lock there: remove it");
  if (::flock(lock_.fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[256] = {};
    if (::pread(lock_.fd, buf, sizeof buf - 1, 0) > 0) holder = buf;
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

  refuse_foreign_entries(dir);
  const std::string traces = traces_of_a_run(dir);
  if (!traces.empty() && mode == RunDirMode::fresh)
    DL_FAIL("train", "the run directory " << dir << " already holds a run (" << traces
                                          << "); continue it with --resume, or start over "
                                             "with --overwrite (deletes them)");
  if (!traces.empty() && mode == RunDirMode::overwrite) {
    const int kept = remove_previous_run(dir);
    log << "--overwrite: removed the previous run's " << traces << " from " << dir << "\n";
    if (kept > 0)
      log << "--overwrite: kept " << kept << " file" << (kept > 1 ? "s" : "")
          << " in checkpoints/ or tensor_logs/ that driftless did not write\n";
  }
  if (const int n = remove_stale_temporaries(dir); n > 0)
    log << "removed " << n << " temporary file" << (n > 1 ? "s" : "")
        << " of interrupted writes from " << dir << "\n";

  // Found now rather than at the first checkpoint, maybe hours in.
  const fs::path checkpoints = fs::path(dir) / "checkpoints";
  fs::create_directories(checkpoints, ec);
  const fs::path probe = checkpoints / (".write_test." + std::to_string(::getpid()));
  ::unlink(probe.c_str());  // a leftover of a killed run with our pid; a link is not followed
  const int probe_fd =
      ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const bool writable = !ec && probe_fd >= 0;
  if (probe_fd >= 0) ::close(probe_fd);
  fs::remove(probe, ec);
  DL_CHECK(writable, "train",
           "cannot write checkpoints in " << checkpoints.string() << ": "
                                          << (ec ? ec.message() : std::strerror(errno)));
}

RunDirectory::Descriptor::~Descriptor() {
  if (fd >= 0) ::close(fd);
}

}  // namespace driftless::train
