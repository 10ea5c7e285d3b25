// Sampler: determinism, layout independence (every layout reassembles to the same global
// batch), labels, long-document policies and padding.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <map>

#include "data/random_dataset.h"

namespace driftless::data {
namespace {

// Documents 0..n-1 with given lengths; token k of document d is 1000 * d + k, except the
// last, which is end-of-text (0).
class ListDataset final : public Dataset {
 public:
  explicit ListDataset(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {}
  int64_t num_documents() const override { return int64_t(lengths_.size()); }
  int64_t document_length(int64_t d) const override { return lengths_[size_t(d)]; }
  void read(int64_t d, int64_t offset, int64_t count, int32_t* out) const override {
    for (int64_t k = 0; k < count; ++k)
      out[k] = offset + k == lengths_[size_t(d)] - 1 ? 0 : int32_t(1000 * d + offset + k + 1);
  }
  int32_t vocab_size() const override { return 1 << 30; }
  int32_t end_of_text() const override { return 0; }
  std::string describe() const override { return "list"; }

 private:
  std::vector<int64_t> lengths_;
};

RandomDataset small_random() {
  RandomDatasetConfig c;
  c.num_documents = 40;
  c.max_length = 100;
  c.mean_length = 20;
  c.vocab_size = 1000;
  return RandomDataset(c);
}

TEST(Sampler, DeterministicAndSeeded) {
  auto ds = small_random();
  SamplerConfig c;
  c.sequence_length = 32;
  c.sequences = 4;
  Sampler a(ds, c), b(ds, c);
  // Random access: step 7 asked first or after others gives the same batch.
  auto late = a.batch(7);
  for (int s = 0; s < 7; ++s) b.batch(s);
  auto again = b.batch(7);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(late.sequences[k].tokens, again.sequences[k].tokens);
    EXPECT_EQ(late.sequences[k].document_lengths, again.sequences[k].document_lengths);
  }
  c.seed = 99;
  Sampler other(ds, c);
  EXPECT_NE(other.batch(7).sequences[0].tokens, late.sequences[0].tokens);
}

TEST(Sampler, EpochVisitsEveryDocumentOnceShuffled) {
  ListDataset ds({5, 3, 8, 1, 7, 4, 4});  // 32 tokens per epoch
  SamplerConfig c;
  c.sequence_length = 8;
  c.sequences = 2;
  Sampler s(ds, c);
  EXPECT_EQ(s.tokens_per_epoch(), 32);
  std::map<int64_t, int64_t> seen;  // document -> tokens in epoch 0
  std::vector<int64_t> first_order;
  for (int64_t w = 0; w < 4; ++w) {
    auto seq = s.sequence(w);
    ASSERT_EQ(seq.tokens.size(), 8u);
    int64_t sum = 0;
    for (size_t k = 0; k < seq.document_lengths.size(); ++k) {
      seen[seq.source_documents[k]] += seq.document_lengths[k];
      sum += seq.document_lengths[k];
      if (seq.source_offsets[k] == 0) first_order.push_back(seq.source_documents[k]);
    }
    EXPECT_EQ(sum, 8);
  }
  ASSERT_EQ(seen.size(), 7u);
  for (auto [d, n] : seen) EXPECT_EQ(n, ds.document_length(d));
  EXPECT_NE(first_order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));  // shuffled
  // The next epoch starts at window 4 with another order.
  auto next = s.sequence(4);
  EXPECT_EQ(next.epoch, 1);
  EXPECT_EQ(next.source_offsets[0], 0);
}

TEST(Sampler, LabelsAreNextTokenOfSameDocument) {
  ListDataset ds({5, 3, 12, 2});
  SamplerConfig c;
  c.sequence_length = 8;
  c.shuffle = false;
  Sampler s(ds, c);
  // Stream: d0 (5) d1 (3) | d2 (8 of 12) | d2 (4) d3 (2) d0 (2 of 5) | ...
  auto w0 = s.sequence(0);
  EXPECT_EQ(w0.tokens, (std::vector<int32_t>{1, 2, 3, 4, 0, 1001, 1002, 0}));
  EXPECT_EQ(w0.labels, (std::vector<int32_t>{2, 3, 4, 0, -1, 1002, 0, -1}));
  auto w1 = s.sequence(1);  // d2 split: its last token here has the next one as label
  EXPECT_EQ(w1.document_lengths, (std::vector<int32_t>{8}));
  EXPECT_EQ(w1.labels.back(), 2009);
  auto w2 = s.sequence(2);
  EXPECT_EQ(w2.document_lengths, (std::vector<int32_t>{4, 2, 2}));
  EXPECT_EQ(w2.source_offsets, (std::vector<int64_t>{8, 0, 0}));
  EXPECT_EQ(w2.epoch, 0);
  EXPECT_EQ(w2.loss_tokens(), 3 + 1 + 2);
}

TEST(Sampler, TruncateKeepsFirstTokensOfLongDocuments) {
  ListDataset ds({3, 20, 5});
  SamplerConfig c;
  c.sequence_length = 8;
  c.shuffle = false;
  c.long_documents = LongDocuments::truncate;
  Sampler s(ds, c);
  EXPECT_EQ(s.tokens_per_epoch(), 3 + 8 + 5);
  auto w1 = s.sequence(1);  // d1 tokens 5..7 (of 8 kept), then d2
  EXPECT_EQ(w1.document_lengths, (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(w1.labels[2], -1);  // last kept token of the truncated document
  EXPECT_EQ(parse_long_documents("truncate"), LongDocuments::truncate);
  EXPECT_THROW(parse_long_documents("drop"), Error);
}

TEST(Sampler, PaddingRoundsDocumentsUp) {
  ListDataset ds({5, 3, 6});
  SamplerConfig c;
  c.sequence_length = 8;
  c.shuffle = false;
  c.pad_documents_to = 4;
  Sampler s(ds, c);
  EXPECT_EQ(s.tokens_per_epoch(), 8 + 4 + 8);
  auto w0 = s.sequence(0);
  EXPECT_EQ(w0.document_lengths, (std::vector<int32_t>{5}));
  EXPECT_EQ(w0.labels, (std::vector<int32_t>{2, 3, 4, 0, -1, -1, -1, -1}));
  auto w1 = s.sequence(1);
  EXPECT_EQ(w1.document_lengths, (std::vector<int32_t>{3, 4}));
  auto w2 = s.sequence(2);  // rest of d2 (2 real + 2 padding), then epoch 1
  EXPECT_EQ(w2.document_lengths[0], 2);
  ModelInput in = make_model_input(w2, {0, 1, 0, 1}, 4);
  EXPECT_EQ(in.seqused_q[0], 2);
  EXPECT_EQ(in.cu_seqlens_q_padded[1], 4);
  EXPECT_EQ(in.loss_mask[2], 0);
  c.pad_documents_to = 3;
  EXPECT_THROW(Sampler bad(ds, c), Error);
}

// Every layout (m micro-sequences x P sdp ranks) reassembles to the single-slice input.
TEST(Sampler, LayoutIndependence) {
  auto ds = small_random();
  SamplerConfig c;
  c.sequence_length = 48;
  c.sequences = 3;
  Sampler s(ds, c);
  for (int64_t step : {0, 5}) {
    auto batch = s.batch(step);
    int64_t loss_tokens = 0;
    for (const auto& seq : batch.sequences) {
      ModelInput whole = make_model_input(seq, {0, 1, 0, 1}, 0);
      for (int m : {1, 2, 3, 4}) {
        for (int P : {1, 2, 4}) {
          if ((48 / m) % P) continue;
          std::vector<int32_t> tokens, labels, mask, pos, doc;
          for (int i = 0; i < m; ++i) {
            for (int r = 0; r < P; ++r) {
              ModelInput in = make_model_input(seq, {i, m, r, P}, 0);
              check_canonical(in);
              tokens.insert(tokens.end(), in.tokens.begin(), in.tokens.end());
              labels.insert(labels.end(), in.labels.begin(), in.labels.end());
              mask.insert(mask.end(), in.loss_mask.begin(), in.loss_mask.end());
              pos.insert(pos.end(), in.position_index.begin(), in.position_index.end());
              doc.insert(doc.end(), in.document_index_q.begin(), in.document_index_q.end());
            }
          }
          EXPECT_EQ(tokens, whole.tokens);
          EXPECT_EQ(labels, whole.labels);
          EXPECT_EQ(mask, whole.loss_mask);
          EXPECT_EQ(pos, whole.position_index);
          EXPECT_EQ(doc, whole.document_index_q);
        }
      }
      for (int32_t v : whole.loss_mask) loss_tokens += v;
    }
    EXPECT_EQ(loss_tokens, batch.loss_tokens);
  }
}

TEST(Sampler, RejectsBadConfig) {
  auto ds = small_random();
  SamplerConfig c;
  c.sequence_length = 0;
  EXPECT_THROW(Sampler bad(ds, c), Error);
  c.sequence_length = 16;
  c.sequences = 0;
  EXPECT_THROW(Sampler bad(ds, c), Error);
}

}  // namespace
}  // namespace driftless::data
