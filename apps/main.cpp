// Entry point of `driftless`: builds the CLI11 app from the registered subcommands, runs
// the chosen one, and turns a driftless::Error into one clear line and a non-zero exit.
#include <filesystem>
#include <iostream>
#include <map>

#include "apps/command.h"
#include "engine/core/error.h"

namespace driftless::apps {
std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}
}  // namespace driftless::apps

int main(int argc, char** argv) {
  using namespace driftless::apps;
  CLI::App app{
      "driftless: train GPT-2-sized transformers on packed variable-length documents, with "
      "multi-GPU runs that match the single-GPU run tensor by tensor."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "driftless 0.1");
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const driftless::Error& e) {
    std::cerr << "driftless: error: " << e.what() << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A file the user named or owns (a run directory, a dataset): the message names the path
    // and the system's reason.
    std::cerr << "driftless: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "driftless: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
