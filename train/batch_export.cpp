// export_batches: the sampler's global batches of a run in one safetensors file.
#include "train/batch_export.h"

#include <nlohmann/json.hpp>

#include "data/sampler.h"
#include "engine/core/error.h"
#include "engine/core/safetensors.h"
#include "train/trainer.h"

namespace driftless::train {
namespace {

// One split's batches as the tensors export_batches documents.
void add_split(const std::string& split, const data::Sampler& sampler, int64_t first, int64_t count,
               std::vector<std::pair<std::string, Tensor>>& out) {
  const int64_t B = sampler.config().sequences, S = sampler.config().sequence_length;
  std::vector<int32_t> tokens, labels, counts, lengths;
  std::vector<int64_t> documents, offsets, loss_tokens;
  tokens.reserve(size_t(count * B * S));
  labels.reserve(size_t(count * B * S));
  for (int64_t k = 0; k < count; ++k) {
    const data::GlobalBatch batch = sampler.batch(first + k);
    loss_tokens.push_back(batch.loss_tokens);
    for (const data::PackedSequence& s : batch.sequences) {
      tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
      labels.insert(labels.end(), s.labels.begin(), s.labels.end());
      counts.push_back(int32_t(s.document_lengths.size()));
      lengths.insert(lengths.end(), s.document_lengths.begin(), s.document_lengths.end());
      documents.insert(documents.end(), s.source_documents.begin(), s.source_documents.end());
      offsets.insert(offsets.end(), s.source_offsets.begin(), s.source_offsets.end());
    }
  }
  out.push_back({split + ".tokens", Tensor::from_vector(tokens, {count, B, S})});
  out.push_back({split + ".labels", Tensor::from_vector(labels, {count, B, S})});
  out.push_back({split + ".document_counts", Tensor::from_vector(counts, {count, B})});
  out.push_back({split + ".document_lengths", Tensor::from_vector(lengths)});
  out.push_back({split + ".source_documents", Tensor::from_vector(documents)});
  out.push_back({split + ".source_offsets", Tensor::from_vector(offsets)});
  out.push_back({split + ".loss_tokens", Tensor::from_vector(loss_tokens)});
}

}  // namespace

void export_batches(const Config& config, const BatchExport& what, const std::string& path) {
  DL_CHECK(what.first_step >= 0 && what.steps >= 1 && what.validation_batches >= 0, "batch_export",
           "expected first step >= 0, steps >= 1 and validation batches >= 0, got "
               << what.first_step << ", " << what.steps << " and " << what.validation_batches);
  const std::unique_ptr<data::Dataset> train = open_training_data(config, false);
  DL_CHECK(train, "batch_export", "expected data.path to name a dataset, got none");
  const data::SamplerConfig sc = sampler_config(config);
  const data::Sampler sampler(*train, sc);
  std::vector<std::pair<std::string, Tensor>> tensors;
  add_split("train", sampler, what.first_step, what.steps, tensors);
  nlohmann::json meta{{"sequences", sc.sequences},
                      {"sequence_length", sc.sequence_length},
                      {"seed", sc.seed},
                      {"first_step", what.first_step},
                      {"steps", what.steps},
                      {"train", train->describe()},
                      {"end_of_text", train->end_of_text()}};
  if (what.validation_batches > 0) {
    // Trainer::evaluate: the validation set's batches from 0, else training batches from 2^40.
    const std::unique_ptr<data::Dataset> val = open_training_data(config, true);
    const data::Sampler val_sampler(val ? *val : *train, sc);
    add_split("validation", val_sampler, val ? 0 : int64_t(1) << 40, what.validation_batches,
              tensors);
    meta["validation_batches"] = what.validation_batches;
    meta["validation"] = val ? val->describe() : "training stream from batch 2^40";
  }
  write_safetensors(path, tensors, {{"batches", meta.dump()}});
}

}  // namespace driftless::train
