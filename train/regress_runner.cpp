// Child-process launching of regression layouts (regress_runner.h).
#include "train/regress_runner.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <iomanip>
#include <cstdlib>  // mkdtemp
#include <limits>
#include <map>
#include <optional>
#include <ostream>

#include "engine/core/env.h"
#include "train/config.h"

extern char** environ;

namespace driftless::train {

namespace fs = std::filesystem;

namespace {

// Runs argv with extra environment, stdout+stderr to log_path; returns the exit status.
int run_child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const std::string& log_path) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    if (!env.count(s.substr(0, s.find('=')))) envs.push_back(s);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid;
  const int rc = posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  DL_CHECK(rc == 0, "regress", "could not start " << argv[0] << " (error " << rc << ")");
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Open MPI 4 keeps every job's session files under one directory a user and host
// (ompi.<host>.<uid> in the temp directory), created by the first job and removed by the last:
// two mpiruns that start together can both try to create it, and the loser fails before any
// rank starts ("mkdir ... File exists", orte_session_dir failed). Each layout's mpirun
// therefore gets a session directory of its own (OMPI_MCA_orte_tmpdir_base), short so that
// the sockets under it stay within the length of a socket path, removed when the layout ends.
// One set by the user (the environment or the layout's env) is kept as it is.
class MpiSessionDir {
 public:
  explicit MpiSessionDir(std::map<std::string, std::string>& env) {
    static const char* kKey = "OMPI_MCA_orte_tmpdir_base";
    if (env.count(kKey) || env_set(kKey)) return;
    std::string templ = (fs::temp_directory_path() / "dl-mpi-XXXXXX").string();
    DL_CHECK(mkdtemp(templ.data()) != nullptr, "regress",
             "could not make a session directory for mpirun under "
                 << fs::temp_directory_path().string());
    dir_ = templ;
    env[kKey] = dir_;
  }
  ~MpiSessionDir() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  MpiSessionDir(const MpiSessionDir&) = delete;
  MpiSessionDir& operator=(const MpiSessionDir&) = delete;

 private:
  std::string dir_;
};

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
    if (line.find("error") != std::string::npos) error = line;
  }
  return error.empty() ? last : error;
}

}  // namespace

std::vector<LayoutResult> run_regression(const RegressConfig& c, const RegressRunOptions& o,
                                         std::ostream& log) {
  fs::create_directories(c.output_dir);
  std::string steps = "[";
  for (size_t i = 0; i < c.log_steps.size(); ++i) steps += (i ? "," : "") + std::to_string(c.log_steps[i]);
  steps += "]";
  std::map<std::string, bool> ran;
  std::map<std::string, std::string> errors;
  std::map<std::string, std::string> dtype;  // layout -> precision.compute of its run
  size_t name_width = 14;  // the progress lines' name column fits the longest name
  for (const auto& l : c.layouts) name_width = std::max(name_width, l.name.size() + 1);
  for (const auto& l : c.layouts) {
    const std::string dir = fs::absolute(fs::path(c.output_dir) / l.name).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::vector<std::string> argv;
    std::map<std::string, std::string> env = l.env;
    std::optional<MpiSessionDir> session;
    if (l.ranks > 1) {
      argv = {o.mpirun, "-np", std::to_string(l.ranks), "--oversubscribe"};
      if (geteuid() == 0) argv.push_back("--allow-run-as-root");
      session.emplace(env);
    }
    // One evaluation, after the last step: validation losses are compared too.
    const std::string eval = "training.eval_interval=" + std::to_string(c.steps);
    for (const auto& a : std::vector<std::string>{
             o.driftless_binary, "train", "-c", c.run_config, "-q", "--set",
             "run.output_dir=" + dir, "--set", "training.steps=" + std::to_string(c.steps), "--set",
             "run.tensor_logs.steps=" + steps, "--set", eval})
      argv.push_back(a);
    for (const auto& ov : l.overrides) {
      argv.push_back("--set");
      argv.push_back(ov);
    }
    const auto t0 = std::chrono::steady_clock::now();
    log << "  running " << std::left << std::setw(int(name_width)) << l.name << std::flush;
    const int status = run_child(argv, env, dir + "/train.log");
    session.reset();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ran[l.name] = status == 0;
    if (status != 0) errors[l.name] = "train exited with " + std::to_string(status) + ": " + last_line(dir + "/train.log");
    log << (status == 0 ? "done" : "FAILED") << " (" << std::fixed << std::setprecision(1) << secs
        << " s)" << (status == 0 ? "" : "  " + errors[l.name]) << "\n";
    if (status == 0)
      dtype[l.name] = dtype_name(load_config(dir + "/config.yaml").precision.compute);
  }
  auto dtype_of = [&](const RegressLayout& l) {
    // A comparison takes the tolerances of its lower precision: bf16 if either run is.
    return dtype[l.name] == "bf16" || dtype[l.baseline] == "bf16" ? std::string("bf16")
                                                                   : std::string("f32");
  };
  std::map<std::string, std::map<std::string, double>> tolerances = c.tolerances;
  for (const DerivedTolerances& d : c.derived_tolerances) {
    const auto it = std::find_if(c.layouts.begin(), c.layouts.end(),
                                 [&](const RegressLayout& l) { return l.name == d.layout; });
    DL_CHECK(it != c.layouts.end() && ran[it->name] && ran[it->baseline], "regress",
             "cannot derive " << d.dtype << " tolerances: layout " << d.layout
                              << " or its baseline did not run");
    const std::string ref = fs::absolute(fs::path(c.output_dir) / it->baseline).string();
    const std::string test = fs::absolute(fs::path(c.output_dir) / it->name).string();
    const LayoutResult m = compare_runs(ref, test, c.log_steps, {}, c.epsilon,
                                        overrides_for(dtype_of(*it), c.tolerance_overrides));
    const std::map<std::string, double> worst = m.worst_by_class();
    log << d.dtype << " tolerances = " << d.factor << " x the drift of " << d.layout << " vs "
        << it->baseline << ":";
    // Clamped to [the f32 bound, the written bound of this dtype], when given: a bug in the
    // reference layout must not widen every other layout's tolerance without limit.
    auto written = [&](const std::string& dt, const std::string& kind, double fallback) {
      auto a = c.tolerances.find(dt);
      if (a == c.tolerances.end()) return fallback;
      auto b = a->second.find(kind);
      return b == a->second.end() ? fallback : b->second;
    };
    for (const auto& [kind, v] : worst) {
      const double lo = written("f32", kind, 0.0);
      const double hi = written(d.dtype, kind, std::numeric_limits<double>::infinity());
      const double t = std::min(std::max(d.factor * v, lo), hi);
      tolerances[d.dtype][kind] = t;
      log << " " << kind << " " << std::scientific << std::setprecision(2) << t
          << (t == hi && d.factor * v > hi ? " (ceiling)" : "");
    }
    log << std::defaultfloat << "\n";
  }
  std::vector<LayoutResult> results;
  for (const auto& l : c.layouts) {
    if (l.baseline == "none") continue;
    LayoutResult r;
    const std::string ref = fs::absolute(fs::path(c.output_dir) / l.baseline).string();
    const std::string test = fs::absolute(fs::path(c.output_dir) / l.name).string();
    if (!ran[l.name] || !ran[l.baseline]) {
      r.ran = false;
      r.error = !ran[l.baseline] ? "baseline " + l.baseline + " failed: " + errors[l.baseline] : errors[l.name];
    } else {
      const std::string dt = dtype_of(l);
      auto tol = tolerances.find(dt);
      DL_CHECK(tol != tolerances.end(), "regress", "no tolerances for dtype " << dt);
      if (l.exact) {
        std::map<std::string, double> zero;
        for (const auto& [kind, value] : tol->second) zero[kind] = 0.0;
        r = compare_runs(ref, test, c.log_steps, zero, c.epsilon, {});
      } else {
        r = compare_runs(ref, test, c.log_steps, tol->second, c.epsilon,
                         overrides_for(dt, c.tolerance_overrides));
      }
    }
    r.name = l.name;
    r.baseline = l.baseline;
    r.run_dir = test;
    r.baseline_dir = ref;
    r.ranks = l.ranks;
    results.push_back(r);
  }
  return results;
}

}  // namespace driftless::train
