// export_batches (train/batch_export.h): the file holds the sampler's global batches of the
// asked steps and the validation batches Trainer::evaluate reads, piece by piece.
#include "train/batch_export.h"

#include <gtest/gtest.h>

#include <numeric>

#include "data/sampler.h"
#include "engine/core/safetensors.h"
#include "tests/test_paths.h"
#include "tests/train/tiny_run.h"

namespace driftless::train {
namespace {

// Checks batch k of `split` in the file against the sampler's batch `step`.
void expect_batch(const SafetensorsFile& f, const std::string& split, int64_t k,
                  const data::GlobalBatch& want, int64_t piece_begin) {
  const auto tokens = f.get(split + ".tokens").select(0, k).to_vector<int32_t>();
  const auto labels = f.get(split + ".labels").select(0, k).to_vector<int32_t>();
  const auto counts = f.get(split + ".document_counts").select(0, k).to_vector<int32_t>();
  const auto lengths = f.get(split + ".document_lengths").to_vector<int32_t>();
  const auto documents = f.get(split + ".source_documents").to_vector<int64_t>();
  const auto offsets = f.get(split + ".source_offsets").to_vector<int64_t>();
  EXPECT_EQ(f.get(split + ".loss_tokens").to_vector<int64_t>()[size_t(k)], want.loss_tokens);
  size_t at = 0, piece = size_t(piece_begin);
  for (size_t b = 0; b < want.sequences.size(); ++b) {
    const data::PackedSequence& s = want.sequences[b];
    for (size_t t = 0; t < s.tokens.size(); ++t, ++at) {
      ASSERT_EQ(tokens[at], s.tokens[t]) << split << " batch " << k << " sequence " << b;
      ASSERT_EQ(labels[at], s.labels[t]) << split << " batch " << k << " sequence " << b;
    }
    ASSERT_EQ(counts[b], int32_t(s.document_lengths.size()));
    for (size_t d = 0; d < s.document_lengths.size(); ++d, ++piece) {
      EXPECT_EQ(lengths[piece], s.document_lengths[d]);
      EXPECT_EQ(documents[piece], s.source_documents[d]);
      EXPECT_EQ(offsets[piece], s.source_offsets[d]);
    }
  }
}

TEST(BatchExport, HoldsTheSamplersBatchesAndTheValidationBatches) {
  const std::string path = testing::scratch_dir() + "/batches.safetensors";
  const Config c = tiny_run::make_config(testing::scratch_dir() + "/run");
  export_batches(c, {3, 2, 2}, path);  // steps 3 and 4, two validation batches
  const SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.get("train.tokens").shape(), (Shape{2, 4, 32}));
  EXPECT_EQ(f.get("validation.labels").shape(), (Shape{2, 4, 32}));
  ASSERT_TRUE(f.metadata().count("batches"));
  EXPECT_NE(f.metadata().at("batches").find("\"first_step\":3"), std::string::npos);

  const auto train_data = open_training_data(c, false), val_data = open_training_data(c, true);
  const data::Sampler train(*train_data, sampler_config(c)), val(*val_data, sampler_config(c));
  int64_t pieces = 0;
  for (int64_t k = 0; k < 2; ++k) {
    const data::GlobalBatch b = train.batch(3 + k);
    expect_batch(f, "train", k, b, pieces);
    for (const auto& s : b.sequences) pieces += int64_t(s.document_lengths.size());
  }
  EXPECT_EQ(f.get("train.document_lengths").numel(), pieces);
  expect_batch(f, "validation", 0, val.batch(0), 0);
  // The validation set is not the training stream.
  EXPECT_NE(f.get("validation.tokens").select(0, 0).to_vector<int32_t>(),
            f.get("train.tokens").select(0, 0).to_vector<int32_t>());
  // Every sequence's pieces fill it.
  const auto lengths = f.get("train.document_lengths").to_vector<int32_t>();
  EXPECT_EQ(std::accumulate(lengths.begin(), lengths.end(), int64_t(0)), 2 * 4 * 32);
}

TEST(BatchExport, RefusesBadRequests) {
  const Config c = tiny_run::make_config(testing::scratch_dir() + "/run");
  const std::string path = testing::scratch_dir() + "/bad.safetensors";
  EXPECT_NE(tiny_run::error_of([&] {
              export_batches(c, {0, 0, 0}, path);
            }).find("[batch_export] expected first step >= 0, steps >= 1"),
            std::string::npos);
  Config memmap = c;
  memmap.data.format = DataFormat::memmap;
  memmap.data.path = "";
  EXPECT_NE(tiny_run::error_of([&] {
              export_batches(memmap, {0, 1, 0}, path);
            }).find("expected data.path to name a dataset"),
            std::string::npos);
}

}  // namespace
}  // namespace driftless::train
