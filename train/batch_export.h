// The global batches of a run written to one file, for an outside reference that must train
// on the very batches the trainer draws (tests/reference/train_parity.py): the sampler's
// output for steps [first_step, first_step + steps) and the validation batches the trainer
// evaluates (ARCHITECTURE.md "Layout independence of data": a batch depends on the dataset,
// the seed and the step only).
#pragma once
#include <cstdint>
#include <string>

#include "train/config.h"

namespace driftless::train {

struct BatchExport {
  int64_t first_step = 0;
  int64_t steps = 1;
  // Validation batches 0 .. n-1 of data.validation_path (or, without one, the training
  // stream far beyond the run, as Trainer::evaluate reads it); 0 writes none.
  int64_t validation_batches = 0;
};

// Writes `path` (safetensors). For each split ("train", "validation"), with K its batches,
// B = batch.sequences and S = batch.sequence_length:
//   <split>.tokens, <split>.labels    (K, B, S) I32, labels -1 where a token has none
//   <split>.document_counts           (K, B) I32: document pieces of each sequence
//   <split>.document_lengths          I32, every piece's real tokens, sequence after sequence
//   <split>.source_documents, <split>.source_offsets   I64, where each piece comes from in the
//                                     dataset (its document index and first token)
//   <split>.loss_tokens               (K) I64: tokens with a label in each global batch
// and metadata "batches": JSON with the sampler's settings, the steps and the datasets.
void export_batches(const Config& config, const BatchExport& what, const std::string& path);

}  // namespace driftless::train
