// The environment of driftless: every switch of its own is DRIFTLESS_<NAME> (docs/building.md
// lists them); besides them it reads only what launchers and toolkits set (the MPI or Slurm
// local rank, HOME, XDG_CACHE_HOME, CUDA_HOME, Open MPI's OMPI_MCA_orte_tmpdir_base). This is
// the one place that reads any of them (tests/e2e/scripts/check_getenv.py). Set and empty
// count as unset.
#pragma once
#include <string>

namespace driftless {

// The value of `name`, or "" when unset.
std::string env_value(const char* name);
// Whether `name` is set to a non-empty value.
bool env_set(const char* name);

}  // namespace driftless
