// The step plan (train/step_plan.h): the order the trainer runs forwards and
// backwards in, the K/V slots of a depth-first group, and the slices of ring and a2a ranks.
#include "train/step_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "train/test_faults.h"

namespace driftless::train {
namespace {

data::GlobalBatch batch_of(int64_t sequences) {
  data::GlobalBatch b;
  for (int64_t s = 0; s < sequences; ++s) {
    data::PackedSequence seq;
    seq.document_lengths = {5, 0, 11, 3, 13, 16};  // 48 tokens
    for (int32_t l : seq.document_lengths)
      for (int32_t j = 0; j < l; ++j) {
        seq.tokens.push_back(int32_t((j + s) % 7));
        seq.labels.push_back(j + 1 < l ? (j + 1) % 7 : -1);
      }
    b.sequences.push_back(seq);
  }
  return b;
}

Layout layout(int64_t df, int64_t bf, int64_t m, int64_t dp = 1, int64_t rank = 0) {
  Layout l;
  l.depth_first = df;
  l.breadth_first = bf;
  l.micro_sequences = m;
  l.data_parallel = dp;
  l.rank = rank;
  return l;
}

TEST(StepPlan, ForwardInOrderBackwardReversedSlotsPerGroup) {
  const StepPlan plan = plan_step(layout(2, 2, 3), batch_of(8));
  ASSERT_EQ(plan.groups.size(), 2u);
  std::set<int64_t> seen;
  for (size_t g = 0; g < 2; ++g) {
    const PlannedGroup& group = plan.groups[g];
    ASSERT_EQ(group.forward.size(), 6u);  // 2 micro-batches x 3 micro-sequences
    for (size_t f = 0; f < 6; ++f) {
      const PlannedForward& fw = group.forward[f];
      EXPECT_EQ(fw.micro_batch, int64_t(f / 3));
      EXPECT_EQ(fw.micro_sequence, int64_t(f % 3));
      ASSERT_EQ(fw.inputs.size(), 2u);  // 8 sequences / 2 groups / 2 micro-batches
      for (size_t j = 0; j < 2; ++j) {
        const layers::PartInput& in = fw.inputs[j];
        // Slots count the group's sequences from 0: micro-batch 1 takes the next ones.
        EXPECT_EQ(in.slot, fw.micro_batch * 2 + int64_t(j));
        EXPECT_EQ(in.global_sequence, int64_t(g) * 4 + in.slot);
        EXPECT_EQ(in.input->micro_sequence, fw.micro_sequence);
        EXPECT_EQ(in.whole, nullptr);
        if (fw.micro_sequence == 0) seen.insert(in.global_sequence);
      }
    }
    EXPECT_EQ(group.backward, (std::vector<int64_t>{5, 4, 3, 2, 1, 0}));
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(StepPlan, DataRanksTakeTheirBlockOfSequences) {
  const StepPlan plan = plan_step(layout(1, 1, 1, 2, 1), batch_of(8));
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_EQ(plan.groups[0].forward.size(), 1u);
  std::vector<int64_t> sequences;
  for (const auto& in : plan.groups[0].forward[0].inputs) sequences.push_back(in.global_sequence);
  EXPECT_EQ(sequences, (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(StepPlan, LossRecomputedWhenSeveralForwardsPrecedeTheirBackwards) {
  EXPECT_FALSE(plan_step(layout(1, 1, 1), batch_of(4)).recompute_loss);
  EXPECT_FALSE(plan_step(layout(2, 1, 1), batch_of(4)).recompute_loss);  // one forward a group
  EXPECT_TRUE(plan_step(layout(1, 1, 2), batch_of(4)).recompute_loss);
  EXPECT_TRUE(plan_step(layout(1, 2, 1), batch_of(4)).recompute_loss);
}

TEST(StepPlan, EvaluationRunsWholeSequencesOnTheFirstRankOfEach) {
  PlanOptions o;
  o.evaluation = true;
  Layout sdp = layout(2, 2, 3, 2, 2);  // data rank 1, sdp rank 0 of 2
  sdp.sequence_data_parallel = 2;
  const StepPlan plan = plan_step(sdp, batch_of(8), o);
  EXPECT_FALSE(plan.recompute_loss);
  ASSERT_EQ(plan.groups.size(), 1u);
  const PlannedGroup& g = plan.groups[0];
  EXPECT_TRUE(g.backward.empty());
  std::vector<int64_t> sequences;
  for (const PlannedForward& f : g.forward) {
    ASSERT_EQ(f.inputs.size(), 1u);  // one whole sequence per forward, in slot 0
    const layers::PartInput& in = f.inputs[0];
    EXPECT_EQ(in.slot, 0);
    EXPECT_EQ(in.input->query_begin, 0);
    EXPECT_EQ(in.input->query_end, 48);
    EXPECT_EQ(in.input->first_document_begin, 0);
    sequences.push_back(in.global_sequence);
  }
  EXPECT_EQ(sequences, (std::vector<int64_t>{4, 5, 6, 7}));  // data rank 1's half
  sdp.rank = 3;  // sdp rank 1: the sequences are rank 2's
  EXPECT_TRUE(plan_step(sdp, batch_of(8), o).groups.empty());
}

TEST(StepPlan, ReversedMicroSequencesFaultRunsForwardLastToFirst) {
  TestFaults faults = TestFaults::parse("reverse_micro_sequences");
  StepPlan plan = plan_step(layout(1, 2, 4), batch_of(4));
  faults.rewrite(plan);
  const PlannedGroup& g = plan.groups[0];
  std::vector<int64_t> order, batches;
  for (const auto& f : g.forward) {
    order.push_back(f.micro_sequence);
    batches.push_back(f.micro_batch);
  }
  EXPECT_EQ(order, (std::vector<int64_t>{3, 2, 1, 0, 3, 2, 1, 0}));
  EXPECT_EQ(batches, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  // The backward still goes from the last micro-batch and micro-sequence to the first.
  for (size_t n = 0; n < g.backward.size(); ++n) {
    const PlannedForward& f = g.forward[size_t(g.backward[n])];
    EXPECT_EQ(f.micro_batch, n < 4 ? 1 : 0);
    EXPECT_EQ(f.micro_sequence, int64_t(3 - n % 4));
  }
}

TEST(StepPlan, ShiftedPositionsFaultMovesEveryPartButTheFirst) {
  const StepPlan clean = plan_step(layout(1, 1, 2), batch_of(1));
  StepPlan plan = clean;
  TestFaults::parse("shift_positions").rewrite(plan);
  const auto& f0 = plan.groups[0].forward[0].inputs[0].input;
  const auto& f1 = plan.groups[0].forward[1].inputs[0].input;
  EXPECT_EQ(f0->position_index, clean.groups[0].forward[0].inputs[0].input->position_index);
  std::vector<int32_t> shifted = clean.groups[0].forward[1].inputs[0].input->position_index;
  for (int32_t& p : shifted) ++p;
  EXPECT_EQ(f1->position_index, shifted);
  EXPECT_THROW(TestFaults::parse("layer=1,nonsense"), Error);
}

TEST(StepPlan, RingListsTwoChunksPerSequenceAndA2aTheWholeMicroSequence) {
  Layout ring = layout(1, 1, 2, 1, 1);
  ring.context_parallel = 2;
  ring.cp_kind = ContextParallel::ring;
  const StepPlan rp = plan_step(ring, batch_of(2));
  for (const auto& f : rp.groups[0].forward) {
    ASSERT_EQ(f.inputs.size(), 4u);
    for (size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(f.inputs[2 * j].slot, f.inputs[2 * j + 1].slot);
      // Rank 1 of 2: chunks 1 and 2 of the 4 chunks (6 rows) of a 24-row micro-sequence.
      const int64_t L = 24, c = L / 4, base = f.micro_sequence * L;
      EXPECT_EQ(f.inputs[2 * j].input->query_begin, base + 1 * c);
      EXPECT_EQ(f.inputs[2 * j + 1].input->query_begin, base + 2 * c);
    }
  }
  Layout a2a = layout(1, 1, 2, 1, 1);
  a2a.context_parallel = 2;
  a2a.cp_kind = ContextParallel::a2a;
  const StepPlan ap = plan_step(a2a, batch_of(2));
  for (const auto& f : ap.groups[0].forward) {
    ASSERT_EQ(f.inputs.size(), 2u);
    for (const auto& in : f.inputs) {
      ASSERT_NE(in.whole, nullptr);
      EXPECT_EQ(in.whole->query_begin, f.micro_sequence * 24);
      EXPECT_EQ(in.whole->num_queries(), 24);
      EXPECT_EQ(in.input->query_begin, f.micro_sequence * 24 + 12);
    }
  }
}

TEST(StepPlan, BatchThatDoesNotDivideIsRefused) {
  EXPECT_THROW(plan_step(layout(3, 1, 1), batch_of(8)), Error);
}

}  // namespace
}  // namespace driftless::train
