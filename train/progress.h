// A one-line progress display for long work: step, loss, tokens/s and ETA, redrawn in place
// on a terminal and printed as plain lines every `every` steps otherwise (logs, CI).
#pragma once
#include <chrono>
#include <iosfwd>
#include <string>

namespace driftless::train {

class Progress {
 public:
  Progress(std::ostream& out, int64_t total, int64_t every, bool enabled);
  // done: steps finished so far (of total); extra: text after the bar.
  void update(int64_t done, const std::string& extra);
  void message(const std::string& line);  // a full line above the bar
  void finish();
  static std::string format_duration(double seconds);

 private:
  std::ostream& out_;
  int64_t total_, every_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_;
  int64_t start_done_ = -1;
  bool drawn_ = false;
};

}  // namespace driftless::train
