// `driftless bench train`: training throughput of a run config, see bench_train.cpp.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace driftless::apps {

// Adds the `train` subcommand to `bench`; *run is set to the function that runs it.
CLI::App* add_bench_train(CLI::App& bench, std::function<int()>* run);

}  // namespace driftless::apps
