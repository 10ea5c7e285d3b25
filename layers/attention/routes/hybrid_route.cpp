// The hybrid route (hybrid_route.h): the group's all-to-all turns this rank's pieces of the two
// ring chunks into the whole chunks for the group's heads, the ring runs over those heads
// across the groups, and the inverse all-to-all brings the output back.
#include "layers/attention/routes/hybrid_route.h"

#include "engine/ops/ops.h"
#include "layers/attention/routes/all_to_all_route.h"
#include "layers/attention/routes/buffer_route.h"
#include "layers/attention/routes/ring_route.h"

namespace driftless::layers {

namespace {
constexpr const char* kOp = "hybrid route";
}  // namespace

int64_t HybridRoute::buffer_kv_heads(const AttentionShape& shape) const {
  const int64_t G = group().ranks();
  DL_CHECK(shape.kv_heads % G == 0, kOp,
           "n_kv_head " << shape.kv_heads << " does not divide into groups of " << G << " ranks");
  return shape.kv_heads / G;
}

Tensor HybridRoute::attend(const RouteCall& call, const Tensor& qkv) {
  KvExchange& gx = group();
  const std::vector<PartInput>& slice = *call.slice;
  const int64_t H = call.shape.heads, Hkv = call.shape.kv_heads, D = call.shape.head_dim;
  const int64_t G = gx.ranks(), Hg = H / G, Hkvg = Hkv / G, chunks = int64_t(slice.size());
  DL_CHECK(chunks % 2 == 0, kOp, "the slice must list two ring chunks per sequence");
  std::vector<RingSequence> seqs;
  for (size_t j = 0; j < slice.size(); j += 2) {
    DL_CHECK(slice[j].slot == slice[j + 1].slot, kOp,
             "the two chunks of a sequence must share a K/V slot");
    for (size_t c = j; c < j + 2; ++c) {
      const data::ModelInput* w = slice[c].whole.get();
      const data::ModelInput& mine = *slice[c].input;
      DL_CHECK(w && w->num_queries() == G * mine.num_queries() &&
                   mine.query_begin == w->query_begin + gx.rank() * mine.num_queries(),
               kOp,
               "entry " << c << " must be piece " << gx.rank() << " of " << G
                        << " of its ring chunk (PartInput::whole), got rows [" << mine.query_begin
                        << ", " << mine.query_end << ")");
    }
    seqs.push_back({{slice[j].whole.get(), slice[j + 1].whole.get()}, slice[j].slot});
  }
  // Each ring chunk is one all-to-all "sequence": its rows in order, the group's heads.
  Tensor heads = tokens_to_heads(qkv, chunks, H, Hkv, gx);  // (chunks Lc, (Hg + 2 Hkvg) D)
  const int64_t T = heads.size(0);
  auto parts = ops::split(heads, {Hg * D, Hkvg * D, Hkvg * D}, 1);
  AttentionSpec base;
  base.score_mod = call.score_mod(gx.rank() * Hg, Hg);
  base.deterministic = call.deterministic;
  base.window_left = call.window_left;
  Tensor y = ring_attention(
      ops::reshape(parts[0], {T, Hg, D}), ops::reshape(parts[1], {T, Hkvg, D}),
      ops::reshape(parts[2], {T, Hkvg, D}), seqs, buffer(call.layer), ring(), base);  // (T, Hg, D)
  return heads_to_tokens(ops::reshape(y, {T, Hg * D}), chunks, gx);
}

}  // namespace driftless::layers
