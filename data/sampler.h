// Sampler: packs documents into sequences of S tokens. Step k's global batch is a function
// of (dataset, seed, step, SamplerConfig) only, never of the parallel layout (ARCHITECTURE.md
// "Layout independence of data"). Each epoch visits every document once in a seeded
// shuffled order; the documents of an epoch, one after another (each padded to a multiple of
// pad_documents_to), form a token stream, and global sequence w is stream window
// [w·S, (w+1)·S). A document crossing a window boundary continues at the start of the next
// sequence (as a new document there: positions restart at 0).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/length_model.h"
#include "data/model_input.h"

namespace driftless::data {

// What to do with a document longer than S tokens.
enum class LongDocuments : uint8_t {
  split,     // keep every token; the document spans several sequences
  truncate,  // keep its first S tokens (its last kept token then has no label)
};
LongDocuments parse_long_documents(const std::string& name);
const char* long_documents_name(LongDocuments policy);

// Names in comments are the YAML keys of the run config.
struct SamplerConfig {
  int64_t sequence_length = 1024;  // batch.sequence_length (S)
  int64_t sequences = 8;           // batch.sequences: sequences per step (global batch B)
  uint64_t seed = 1234;            // training.seed
  LongDocuments long_documents = LongDocuments::split;  // data.long_documents
  int32_t pad_documents_to = 0;  // data.pad_documents_to (0 or 1: none); must divide S
  bool shuffle = true;           // data.shuffle: false keeps dataset order in every epoch
};

// One packed sequence of S tokens.
struct PackedSequence {
  int64_t index = 0;                      // global sequence index: step * B + b
  std::vector<int32_t> tokens;            // [S]; padding holds end-of-text
  std::vector<int32_t> labels;            // [S]; next token of the same document, -1 where none
  std::vector<int32_t> document_lengths;  // real tokens of each document piece, in order
  std::vector<int64_t> source_documents;  // dataset index of each piece
  std::vector<int64_t> source_offsets;    // where each piece starts in its source document
  int64_t epoch = 0;                      // epoch of the window's first token
  int64_t loss_tokens() const;            // labels >= 0
};

struct GlobalBatch {
  int64_t step = 0;
  std::vector<PackedSequence> sequences;  // [B]
  int64_t loss_tokens = 0;  // tokens with a label in the whole global batch (loss scale)
};

class Sampler {
 public:
  // Checks the config against the dataset (throws driftless::Error before any work).
  Sampler(const Dataset& dataset, const SamplerConfig& config);
  const SamplerConfig& config() const { return config_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  PackedSequence sequence(int64_t index) const;
  GlobalBatch batch(int64_t step) const;

 private:
  struct Epoch {
    int64_t number;
    std::vector<int64_t> order;   // document at each slot
    std::vector<int64_t> prefix;  // stream offset of each slot, plus the total
  };
  std::shared_ptr<const Epoch> epoch(int64_t number) const;
  int64_t kept_length(int64_t doc) const;
  const Dataset& dataset_;
  SamplerConfig config_;
  int64_t tokens_per_epoch_ = 0;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const Epoch>> cache_;  // the two most recent epochs
};

// The ModelInput of one (micro-sequence, sdp rank) of a packed sequence: the length model's
// metadata plus tokens, labels and loss_mask sliced to the rank's query rows.
ModelInput make_model_input(const PackedSequence& sequence, const SequencePart& slice,
                            int32_t pad_documents_to);

}  // namespace driftless::data
