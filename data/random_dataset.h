// Seeded synthetic documents for tests and benchmarks: lengths from a configurable
// distribution, tokens hashed from (seed, document, position); each document ends with
// end-of-text. Nothing is stored: every token is computed on read.
#pragma once
#include <cstdint>
#include <string>

#include "data/dataset.h"

namespace driftless::data {

struct RandomDatasetConfig {
  int64_t num_documents = 10000;
  // "uniform": lengths uniform in [min_length, max_length]; "exponential": mean
  // mean_length, clamped to [min_length, max_length] (many short, few long documents);
  // "fixed": every document has mean_length tokens (clamped likewise).
  std::string distribution = "exponential";
  int32_t min_length = 1;
  int32_t max_length = 4096;
  double mean_length = 512;
  int32_t vocab_size = 50257;  // end-of-text is vocab_size - 1
  uint64_t seed = 1234;
};

class RandomDataset final : public Dataset {
 public:
  explicit RandomDataset(const RandomDatasetConfig& config);
  int64_t num_documents() const override { return config_.num_documents; }
  int64_t document_length(int64_t doc) const override;
  void read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const override;
  int32_t vocab_size() const override { return config_.vocab_size; }
  int32_t end_of_text() const override { return config_.vocab_size - 1; }
  std::string describe() const override;

 private:
  RandomDatasetConfig config_;
  bool exponential_;
};

}  // namespace driftless::data
