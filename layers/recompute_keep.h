// What a function wrapped in autograd::checkpoint (training.recompute; layers/recompute.h)
// keeps to run again in the backward: the slice and row lists and the forward options,
// with a sink that passes only gradients, since the first forward logged the values.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/gpt.h"

namespace driftless::layers {

// The sink of a recomputed forward: its forward values were logged by the first forward,
// so only the gradients reach the real sink.
class BackwardOnlySink : public TensorSink {
 public:
  explicit BackwardOnlySink(TensorSink* real) : real_(real) {}
  void write(const std::string& name, const std::string& kind, const Tensor& value,
             const std::vector<PartRows>& rows) override {
    if (kind != "forward") real_->write(name, kind, value, rows);
  }

 private:
  TensorSink* real_;
};

// Copies of the slice and row lists (the caller's die with the forward) and the options of
// the run again (no checkpoint inside a checkpoint).
struct Recomputable {
  std::vector<PartInput> slice;
  std::vector<PartRows> rows;
  ForwardOptions options;
  std::shared_ptr<BackwardOnlySink> quiet;
  Recomputable(const std::vector<PartInput>& s, const std::vector<PartRows>& r,
               const ForwardOptions& o)
      : slice(s), rows(r), options(o) {
    options.recompute = Recompute::none;
    if (o.sink) quiet = std::make_shared<BackwardOnlySink>(o.sink);
  }
  ForwardOptions run(bool recomputing) const {
    ForwardOptions r = options;
    if (recomputing && quiet) r.sink = quiet.get();
    return r;
  }
};

}  // namespace driftless::layers
