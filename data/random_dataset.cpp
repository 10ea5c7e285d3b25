// RandomDataset (see random_dataset.h); counter-based hashing only, so identical everywhere.
#include "data/random_dataset.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/random.h"

namespace driftless::data {

RandomDataset::RandomDataset(const RandomDatasetConfig& c) : config_(c) {
  DL_CHECK(
      c.distribution == "uniform" || c.distribution == "exponential" || c.distribution == "fixed",
      "random_dataset",
      "expected distribution uniform, exponential or fixed, got " << c.distribution);
  DL_CHECK(c.num_documents > 0 && c.min_length >= 1 && c.max_length >= c.min_length,
           "random_dataset",
           "expected num_documents > 0 and 1 <= min_length <= max_length, got "
               << c.num_documents << ", " << c.min_length << ", " << c.max_length);
  DL_CHECK(c.vocab_size >= 2, "random_dataset", "expected vocab_size >= 2, got " << c.vocab_size);
  DL_CHECK(c.mean_length > 0, "random_dataset", "expected mean_length > 0");
  exponential_ = c.distribution == "exponential";
}

int64_t RandomDataset::document_length(int64_t doc) const {
  DL_CHECK(doc >= 0 && doc < config_.num_documents, "random_dataset",
           "expected document index in [0, " << config_.num_documents << "), got " << doc);
  const uint64_t s = random::derive(config_.seed, 0);
  const double u = random::uniform01(s, uint64_t(doc));
  double len;
  if (config_.distribution == "fixed")
    len = std::round(config_.mean_length);
  else if (exponential_)
    len = std::ceil(-config_.mean_length * std::log(u));
  else
    len = config_.min_length + std::floor(u * (config_.max_length - config_.min_length + 1));
  return int64_t(std::clamp<double>(len, config_.min_length, config_.max_length));
}

void RandomDataset::read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = document_length(doc);
  DL_CHECK(offset >= 0 && count >= 0 && offset + count <= len, "random_dataset",
           "expected a token range inside document " << doc << " of " << len << " tokens");
  const uint64_t s = random::derive(random::derive(config_.seed, 1), uint64_t(doc));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t pos = offset + k;
    out[k] = pos == len - 1 ? end_of_text()
                            : int32_t(random::hash(s, uint64_t(pos)) % uint64_t(end_of_text()));
  }
}

std::string RandomDataset::describe() const {
  std::ostringstream os;
  os << "random (" << config_.num_documents << " documents, " << config_.distribution
     << " lengths in [" << config_.min_length << ", " << config_.max_length << "], seed "
     << config_.seed << ")";
  return os.str();
}

}  // namespace driftless::data
