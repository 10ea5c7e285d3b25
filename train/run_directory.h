// Ownership of a run directory: the running job holds a lock on it (a second run into it is
// refused while the first runs, never interleaved), a new run into a directory that already
// holds a run's metrics or checkpoints is refused unless it resumes or overwrites, the
// checkpoints folder is checked writable before step 0, and temporary files of killed
// checkpoint writes are removed. Held by rank 0 for the whole run (docs/guarantees.md).
#pragma once
#include <iosfwd>
#include <string>

namespace driftless::train {

enum class RunDirMode {
  fresh,      // the directory must not hold a run yet
  resume,     // continue the run it holds (--resume)
  overwrite,  // delete the run it holds first (--overwrite)
};

class RunDirectory {
 public:
  // Creates dir and dir/checkpoints, takes dir/.lock (released when this object goes, or
  // when the process dies), then applies mode. Every refusal is a driftless::Error that
  // names the directory and what to do.
  RunDirectory(const std::string& dir, RunDirMode mode, std::ostream& log);
  ~RunDirectory() = default;
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return dir_; }

 private:
  // Closing the descriptor releases the lock, also when the constructor throws after
  // taking it.
  struct Descriptor {
    int fd = -1;
    Descriptor() = default;
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    ~Descriptor();
  };
  std::string dir_;
  Descriptor lock_;
};

}  // namespace driftless::train
