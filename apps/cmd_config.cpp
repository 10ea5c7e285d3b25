// `driftless config`: print the effective config of a file (with overrides), or the
// reference of every key.
#include <iostream>

#include "apps/command.h"
#include "train/config.h"

namespace driftless::apps {
namespace {

struct ConfigArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool reference = false;
};

Registrar reg({"config", "Check a config and print its effective YAML, or the key reference",
               [](CLI::App& sub) {
                 auto a = std::make_shared<ConfigArgs>();
                 sub.add_option("--config,-c", a->config, "run config (YAML)");
                 sub.add_option("--set", a->overrides, "override a key (repeatable)");
                 sub.add_flag("--reference", a->reference,
                              "print every key with type, default and meaning (Markdown)");
                 return std::function<int()>([a] {
                   if (a->reference) {
                     std::cout << train::config_reference();
                     return 0;
                   }
                   if (a->config.empty()) {
                     std::cerr << "driftless config: give --config FILE or --reference\n";
                     return 1;
                   }
                   std::cout << train::config_to_yaml(train::load_config(a->config, a->overrides));
                   return 0;
                 });
               }});

}  // namespace
}  // namespace driftless::apps
