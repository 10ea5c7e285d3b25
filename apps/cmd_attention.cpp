// `driftless attention`: replays one attention call dumped to safetensors (forward, and
// backward when the call holds d_out) and writes the results; the file format is in
// layers/attention/replay.h. Wiring only.
#include <iostream>

#include "apps/command.h"
#include "layers/attention/replay.h"

namespace driftless::apps {
namespace {

struct Options {
  std::string in, out, device = "cpu";
};

Registrar reg(
    {"attention",
     "Replay one attention call: read q, k, v, d_out and the spec from --in, write "
     "out, lse, dq, dk, dv (and modifier gradients) to --out",
     [](CLI::App& sub) {
       auto o = std::make_shared<Options>();
       sub.add_option("--in", o->in, "call.safetensors (tensors and spec metadata)")->required();
       sub.add_option("--out", o->out, "result.safetensors to write")->required();
       sub.add_option("--device", o->device,
                      "cpu or cuda (bf16 with head dim 64 or 128 on the tensor-core kernels, else "
                      "the reference ones; no bias or relative-position table on cuda yet)")
           ->check(CLI::IsMember({"cpu", "cuda"}));
       return std::function<int()>([o] {
         layers::replay_attention_file(o->in, o->out, o->device);
         std::cout << "attention replay: wrote " << o->out << "\n";
         return 0;
       });
     }});

}  // namespace
}  // namespace driftless::apps
