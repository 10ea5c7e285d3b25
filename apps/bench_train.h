// `driftless bench train`: training throughput of a run config, see bench_train.cpp.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

namespace driftless::apps {

// Adds the `train` subcommand to `bench`; *run is set to the function that runs it.
CLI::App* add_bench_train(CLI::App& bench, std::function<int()>* run);

// A measurement in the benches' JSON lines: null where it was not measured (NaN).
inline nlohmann::json json_number(double x) {
  return std::isnan(x) ? nlohmann::json() : nlohmann::json(x);
}

}  // namespace driftless::apps
