// Reading metrics.jsonl (metrics_file.h): strict per line, naming file and line number in
// every error, tolerant of keys it does not plot.
#include "train/metrics_file.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace driftless::train {

void MetricsWriter::open(const std::string& path, bool append) {
  path_ = path;
  errno = 0;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  DL_CHECK(out_.good(), "train", "cannot write " << path << ": " << std::strerror(errno));
}

void MetricsWriter::write(const std::string& line) {
  errno = 0;
  out_ << line << "\n" << std::flush;
  DL_CHECK(out_.good(), "train",
           "writing " << path_ << " failed: "
                      << (errno ? std::strerror(errno) : "the stream reports an error")
                      << "; stopping rather than losing metrics");
}

namespace fs = std::filesystem;

namespace {

std::string excerpt(const std::string& line) {
  return line.size() > 60 ? line.substr(0, 57) + "..." : line;
}

}  // namespace

RunMetrics parse_metrics(std::istream& in, const std::string& source) {
  using nlohmann::json;
  std::map<int64_t, double> loss, val, tps;  // by step: a later line for a step wins
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      DL_FAIL("plot", source << ":" << n << ": expected a JSON object, got '" << excerpt(line)
                             << "' (invalid JSON at byte " << e.byte << ")");
    }
    DL_CHECK(j.is_object(), "plot",
             source << ":" << n << ": expected a JSON object, got '" << excerpt(line) << "'");
    const auto step = j.find("step");
    DL_CHECK(step != j.end() && step->is_number_integer() && step->get<int64_t>() >= 0, "plot",
             source << ":" << n << ": expected an integer \"step\" >= 0, got "
                    << (step == j.end() ? std::string("none") : step->dump()));
    const int64_t s = step->get<int64_t>();
    auto take = [&](const char* key, std::map<int64_t, double>& into) {
      const auto v = j.find(key);
      if (v == j.end()) return;
      DL_CHECK(v->is_number() || v->is_null(), "plot",
               source << ":" << n << ": expected a number for \"" << key << "\", got "
                      << excerpt(v->dump()));
      // The trainer writes a NaN or infinite value as null.
      into[s] = v->is_null() ? std::numeric_limits<double>::quiet_NaN() : v->get<double>();
    };
    if (!j.contains("loss") && !j.contains("val_loss")) continue;  // a kind of line not plotted
    take("loss", loss);
    take("val_loss", val);
    take("tokens_per_second", tps);
  }
  RunMetrics m;
  m.path = source;
  auto finite = [&](const std::map<int64_t, double>& from, std::vector<MetricPoint>& to,
                    bool count) {
    for (const auto& [s, v] : from) {
      if (std::isfinite(v))
        to.push_back({s, v});
      else if (count)
        ++m.non_finite;
    }
  };
  finite(loss, m.loss, true);
  finite(val, m.val_loss, true);
  finite(tps, m.tokens_per_second, false);
  return m;
}

std::string run_directory(const std::string& run_dir_or_file) {
  fs::path p = fs::absolute(run_dir_or_file).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // a trailing '/'
  if (fs::is_regular_file(p) || p.filename() == "metrics.jsonl") p = p.parent_path();
  return p.string();
}

std::string run_name(const std::string& run_dir_or_file) {
  return fs::path(run_directory(run_dir_or_file)).filename().string();
}

RunMetrics read_run_metrics(const std::string& arg) {
  DL_CHECK(fs::exists(arg), "plot", arg << ": no such run directory or metrics file");
  const fs::path file = fs::is_directory(arg) ? fs::path(arg) / "metrics.jsonl" : fs::path(arg);
  DL_CHECK(fs::is_regular_file(file), "plot",
           arg << ": no metrics.jsonl (expected a run directory written by `driftless train`)");
  std::ifstream in(file);
  DL_CHECK(in.good(), "plot", "cannot read " << file.string());
  RunMetrics m = parse_metrics(in, file.string());
  m.name = run_name(arg);
  DL_CHECK(!m.loss.empty() || !m.val_loss.empty(), "plot",
           file.string() << ": no data points ("
                         << (m.non_finite ? std::to_string(m.non_finite) +
                                                " losses are non-finite: the run diverged"
                                          : std::string("no line with a loss or val_loss"))
                         << ")");
  return m;
}

void make_names_unique(std::vector<RunMetrics>& runs) {
  // Shared with another run directory (the same directory twice is numbered below).
  auto duplicated = [&](size_t i) {
    for (size_t k = 0; k < runs.size(); ++k)
      if (k != i && runs[k].name == runs[i].name &&
          run_directory(runs[k].path) != run_directory(runs[i].path))
        return true;
    return false;
  };
  // Prefix one more parent directory at a time to the names that are still shared.
  for (int depth = 2; depth <= 8; ++depth) {
    std::vector<size_t> shared;
    for (size_t i = 0; i < runs.size(); ++i)
      if (duplicated(i)) shared.push_back(i);
    if (shared.empty()) break;
    for (size_t i : shared) {
      fs::path dir = run_directory(runs[i].path);
      std::string name;
      for (int d = 0; d < depth && !dir.filename().empty(); ++d, dir = dir.parent_path())
        name = dir.filename().string() + (name.empty() ? "" : "/" + name);
      runs[i].name = name;
    }
  }
  std::map<std::string, int> seen;  // the same directory twice
  for (auto& r : runs)
    if (int k = ++seen[r.name]; k > 1) r.name += " (" + std::to_string(k) + ")";
}

}  // namespace driftless::train
