// Progress display (progress.h).
#include "train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace driftless::train {

Progress::Progress(std::ostream& out, int64_t total, int64_t every, bool enabled)
    : out_(out),
      total_(total),
      every_(every > 0 ? every : 1),
      enabled_(enabled),
      tty_(&out == &std::cerr ? isatty(STDERR_FILENO) : (&out == &std::cout && isatty(STDOUT_FILENO))),
      start_(std::chrono::steady_clock::now()) {}

std::string Progress::format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  std::ostringstream os;
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) os << t / 3600 << "h" << std::setw(2) << std::setfill('0') << (t / 60) % 60 << "m";
  else if (t >= 60) os << t / 60 << "m" << std::setw(2) << std::setfill('0') << t % 60 << "s";
  else os << std::fixed << std::setprecision(1) << s << "s";
  return os.str();
}

void Progress::update(int64_t done, const std::string& extra) {
  if (!enabled_) return;
  if (start_done_ < 0) {
    start_done_ = done - 1;
    start_ = std::chrono::steady_clock::now();
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t since = done - start_done_;
  const double eta = since > 0 ? elapsed / double(since) * double(total_ - done) : -1;
  std::ostringstream line;
  const int width = 24;
  const int filled = total_ > 0 ? int(double(width) * double(done) / double(total_)) : 0;
  line << "[" << std::string(size_t(filled), '#') << std::string(size_t(width - filled), '.')
       << "] " << done << "/" << total_ << "  " << extra << "  ETA " << format_duration(eta);
  if (tty_) {
    out_ << "\r\033[K" << line.str() << std::flush;
    drawn_ = true;
  } else if (done % every_ == 0 || done == total_ || done == 1) {
    out_ << line.str() << "\n" << std::flush;
  }
}

void Progress::message(const std::string& text) {
  if (tty_ && drawn_) out_ << "\r\033[K";
  out_ << text << "\n" << std::flush;
  drawn_ = false;
}

void Progress::finish() {
  if (tty_ && drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace driftless::train
