// Which activations a block recomputes in its backward instead of keeping from its forward
// (ARCHITECTURE.md "Memory": activation recomputation); training.recompute chooses it.
#pragma once

namespace driftless::layers {

// none: every activation is kept. attention: the attention branch (QKV projection, route,
// output projection) is recomputed, the layer norms' and MLP's activations kept. full: a
// block keeps only its input and recomputes its whole forward.
enum class Recompute { none, attention, full };

}  // namespace driftless::layers
