// Tensor taps (ARCHITECTURE.md "Tensor logs"): an identity autograd node after a layer output that
// hands the forward value, and later the gradient flowing into it, to a TensorSink. Rows of
// a tapped tensor are the concatenation of several sequences' query rows; `rows` says where
// each block of rows sits in the global layout, so a sink can reassemble (B, S, ...) tensors
// identical for every layout.
#pragma once
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace driftless::layers {

struct PartRows {
  int64_t sequence = 0;  // global sequence index in the step's batch
  int64_t begin = 0;     // first position in the sequence
  int64_t rows = 0;
};

class TensorSink {
 public:
  virtual ~TensorSink() = default;
  // kind: "forward" or "backward". value's dim 0 is the concatenation of the row blocks.
  virtual void write(const std::string& name, const std::string& kind, const Tensor& value,
                     const std::vector<PartRows>& rows) = 0;
};

// Identity; records the value (forward) and its gradient (backward) when sink is set.
Tensor tap(const Tensor& x, const std::string& name, TensorSink* sink,
           const std::vector<PartRows>& rows);

}  // namespace driftless::layers
