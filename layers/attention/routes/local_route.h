// The local route (route.h): whole sequences on one rank, one micro-sequence each. Every
// sequence's keys are its own rows, so attention reads K and V straight from the QKV
// product: no buffer, no copy.
#pragma once
#include "layers/attention/routes/route.h"

namespace driftless::layers {

class LocalRoute : public AttentionRoute {
 public:
  // Throws unless every sequence of the slice is whole (no micro-sequences, no other rank).
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;
};

}  // namespace driftless::layers
