// Subcommand registry of the `driftless` CLI: each cmd_*.cpp registers itself with a
// static Registrar, so adding a subcommand touches one file.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace driftless::apps {

struct Command {
  std::string name;
  std::string help;
  // Adds options to the subcommand; returns the function that runs it (exit status).
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& commands();

struct Registrar {
  explicit Registrar(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace driftless::apps
