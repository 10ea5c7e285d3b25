// The regression's launcher (train/regress_runner.h): each layout of several ranks gets an
// Open MPI session directory of its own (OMPI_MCA_orte_tmpdir_base), which exists while its
// mpirun runs and is gone after; one the layout sets is kept. A stand-in mpirun (a shell
// script) records what it was given.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/core/env.h"
#include "train/regress_runner.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value after "tmpdir=" on the line of the stand-in's log.
std::string recorded_dir(const std::string& log) {
  const auto at = log.find("tmpdir=");
  if (at == std::string::npos) return "";
  return log.substr(at + 7, log.find('\n', at) - at - 7);
}

TEST(RegressRunner, EachMpiLayoutGetsItsOwnSessionDirectory) {
  if (env_set("OMPI_MCA_orte_tmpdir_base"))
    GTEST_SKIP() << "OMPI_MCA_orte_tmpdir_base is set here: every layout keeps it";
  const fs::path dir = fs::temp_directory_path() / "dl_regress_runner_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path mpirun = dir / "mpirun";
  // Prints the directory it was given and whether it exists, then fails like a launch error.
  std::ofstream(mpirun) << "#!/bin/sh\n"
                        << "echo \"tmpdir=$OMPI_MCA_orte_tmpdir_base\"\n"
                        << "[ -d \"$OMPI_MCA_orte_tmpdir_base\" ] && echo exists\n"
                        << "exit 3\n";
  fs::permissions(mpirun, fs::perms::owner_all);

  RegressConfig c;
  c.run_config = (dir / "run.yaml").string();
  c.output_dir = (dir / "out").string();
  auto layout = [](const std::string& name, int64_t ranks, const std::string& baseline) {
    RegressLayout l;
    l.name = name;
    l.ranks = ranks;
    l.baseline = baseline;
    return l;
  };
  c.layouts = {layout("simple", 1, "none"), layout("a", 2, "simple"), layout("b", 2, "simple"),
               layout("mine", 2, "simple")};
  c.layouts.back().env["OMPI_MCA_orte_tmpdir_base"] = "/x/y";
  RegressRunOptions o;
  o.driftless_binary = "/bin/false";
  o.mpirun = mpirun.string();
  std::ostringstream log;
  const std::vector<LayoutResult> results = run_regression(c, o, log);

  ASSERT_EQ(results.size(), 3u);
  for (const LayoutResult& r : results) EXPECT_FALSE(r.ran) << r.name;
  const std::string a = read(dir / "out/a/train.log"), b = read(dir / "out/b/train.log");
  const std::string da = recorded_dir(a), db = recorded_dir(b);
  ASSERT_FALSE(da.empty()) << a;
  ASSERT_FALSE(db.empty()) << b;
  EXPECT_NE(da, db);
  EXPECT_NE(a.find("exists"), std::string::npos) << a;  // made before mpirun started
  EXPECT_NE(b.find("exists"), std::string::npos) << b;
  EXPECT_FALSE(fs::exists(da)) << da;  // and removed after it ended
  EXPECT_FALSE(fs::exists(db)) << db;
  EXPECT_EQ(recorded_dir(read(dir / "out/mine/train.log")), "/x/y");
  // The one-rank layout runs without mpirun: nothing of the stand-in in its log.
  EXPECT_EQ(read(dir / "out/simple/train.log").find("tmpdir="), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace driftless::train
