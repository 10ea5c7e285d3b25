// The batch layout (train/layout.h): which ModelInputs a rank holds under SDP, ring
// and a2a context parallelism, and that the ranks of a sequence together hold every query row
// of every micro-sequence exactly once.
#include "train/layout.h"

#include <gtest/gtest.h>

#include <set>

#include "layers/attention/routes/all_to_all_route.h"
#include "layers/attention/routes/buffer_route.h"
#include "layers/attention/routes/fault_route.h"
#include "layers/attention/routes/local_route.h"
#include "layers/attention/routes/ring_route.h"
#include "train/test_faults.h"

namespace driftless::train {
namespace {

data::PackedSequence sequence(const std::vector<int32_t>& lengths) {
  data::PackedSequence s;
  s.document_lengths = lengths;
  for (int32_t l : lengths)
    for (int32_t j = 0; j < l; ++j) {
      s.tokens.push_back(j % 7);
      s.labels.push_back(j + 1 < l ? (j + 1) % 7 : -1);
    }
  return s;
}

TEST(Layout, RankInputsCoverEveryRowOnce) {
  const auto seq = sequence({5, 0, 11, 3, 13, 16});  // 48 tokens
  for (ContextParallel kind : {ContextParallel::none, ContextParallel::ring, ContextParallel::a2a})
    for (int32_t P : {1, 2, 3})
      for (int32_t m : {1, 2}) {
        if ((48 / m) % (kind == ContextParallel::ring ? 2 * P : P) != 0) continue;
        std::multiset<int64_t> rows;
        for (int32_t i = 0; i < m; ++i)
          for (int32_t r = 0; r < P; ++r) {
            const auto inputs = rank_inputs(seq, i, m, r, P, kind, 0);
            ASSERT_EQ(inputs.size(), kind == ContextParallel::ring ? 2u : 1u);
            for (const auto& in : inputs) {
              data::check_canonical(in);
              for (int64_t q = in.query_begin; q < in.query_end; ++q) rows.insert(q);
            }
          }
        ASSERT_EQ(rows.size(), 48u);
        for (int64_t q = 0; q < 48; ++q) EXPECT_EQ(rows.count(q), 1u) << q;
      }
}

// The ring's load-balanced split: rank r of P holds chunks r and 2P-1-r of 2P.
TEST(Layout, RingHoldsChunksRAndTheirMirror) {
  const auto seq = sequence({48});
  const auto in = rank_inputs(seq, 1, 2, 0, 3, ContextParallel::ring, 0);  // L = 24, Lc = 4
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].query_begin, 24);          // chunk 0 of micro-sequence 1
  EXPECT_EQ(in[1].query_begin, 24 + 20);     // chunk 5
  EXPECT_EQ(in[1].first_document_begin, 0);  // the document began in micro-sequence 0
}

template <class T>
bool is_a(const std::unique_ptr<layers::AttentionRoute>& r) {
  return dynamic_cast<T*>(r.get()) != nullptr;
}

// The one place a layout picks its attention route.
TEST(Layout, AttentionRouteFollowsTheLayout) {
  auto route = [](int64_t sdp, int64_t m, ContextParallel kind, bool keep_buffers = false) {
    Layout l;
    l.sequence_data_parallel = kind == ContextParallel::none ? sdp : 1;
    l.context_parallel = kind == ContextParallel::none ? 1 : sdp;
    l.cp_kind = kind;
    l.micro_sequences = m;
    return attention_route(l, nullptr, false, nullptr, nullptr, keep_buffers);
  };
  EXPECT_TRUE(is_a<layers::LocalRoute>(route(1, 1, ContextParallel::none)));
  EXPECT_TRUE(is_a<layers::BufferRoute>(route(1, 2, ContextParallel::none)));
  EXPECT_TRUE(is_a<layers::BufferRoute>(route(2, 1, ContextParallel::none)));
  EXPECT_TRUE(is_a<layers::RingRoute>(route(2, 1, ContextParallel::ring)));
  EXPECT_TRUE(is_a<layers::AllToAllRoute>(route(2, 2, ContextParallel::a2a)));
  // A route that hooks wrap keeps its K/V buffers even for whole sequences.
  EXPECT_TRUE(is_a<layers::BufferRoute>(route(1, 1, ContextParallel::none, true)));
  // Test faults wrap the route the layout makes.
  const TestFaults faults;
  const RouteMaker make = [&](KvExchange* ex, bool keep) {
    Layout l;
    return attention_route(l, ex, false, nullptr, nullptr, keep);
  };
  EXPECT_TRUE(is_a<layers::FaultRoute>(faults.route(make, nullptr)));
}

}  // namespace
}  // namespace driftless::train
