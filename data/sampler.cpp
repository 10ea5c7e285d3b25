// Sampler (see sampler.h): random access to any stream window through per-epoch prefix
// sums, so step k costs O(B·S + log N) once its epoch is planned (O(N) per epoch).
#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "engine/core/error.h"
#include "engine/core/random.h"

namespace driftless::data {

LongDocuments parse_long_documents(const std::string& name) {
  if (name == "split") return LongDocuments::split;
  if (name == "truncate") return LongDocuments::truncate;
  DL_FAIL("sampler", "expected long_documents split or truncate, got " << name);
}

const char* long_documents_name(LongDocuments policy) {
  return policy == LongDocuments::split ? "split" : "truncate";
}

int64_t PackedSequence::loss_tokens() const {
  return std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l >= 0; });
}

Sampler::Sampler(const Dataset& dataset, const SamplerConfig& config)
    : dataset_(dataset), config_(config) {
  const int64_t S = config.sequence_length;
  DL_CHECK(S > 0, "sampler", "expected batch.sequence_length > 0, got " << S);
  DL_CHECK(config.sequences > 0, "sampler",
           "expected batch.sequences > 0, got " << config.sequences);
  DL_CHECK(config.pad_documents_to >= 0 &&
               (config.pad_documents_to <= 1 || S % config.pad_documents_to == 0),
           "sampler",
           "expected data.pad_documents_to to divide the sequence length "
               << S << ", got " << config.pad_documents_to);
  DL_CHECK(dataset.num_documents() > 0, "sampler",
           "expected a dataset with documents, got none in " << dataset.describe());
  for (int64_t d = 0; d < dataset.num_documents(); ++d)
    tokens_per_epoch_ += document_extent(kept_length(d), config.pad_documents_to);
  DL_CHECK(tokens_per_epoch_ > 0, "sampler",
           "expected a dataset with tokens, got only empty documents in " << dataset.describe());
}

int64_t Sampler::kept_length(int64_t doc) const {
  const int64_t len = dataset_.document_length(doc);
  return config_.long_documents == LongDocuments::truncate ? std::min(len, config_.sequence_length)
                                                           : len;
}

std::shared_ptr<const Sampler::Epoch> Sampler::epoch(int64_t number) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& e : cache_)
    if (e->number == number) return e;
  auto e = std::make_shared<Epoch>();
  e->number = number;
  const int64_t n = dataset_.num_documents();
  e->order.resize(size_t(n));
  std::iota(e->order.begin(), e->order.end(), int64_t(0));
  if (config_.shuffle) {  // Fisher-Yates with counter-based draws
    const uint64_t s = random::derive(config_.seed, uint64_t(number));
    for (int64_t i = n - 1; i > 0; --i) {
      int64_t j = int64_t(random::hash(s, uint64_t(i)) % uint64_t(i + 1));
      std::swap(e->order[size_t(i)], e->order[size_t(j)]);
    }
  }
  e->prefix.resize(size_t(n) + 1);
  e->prefix[0] = 0;
  for (int64_t k = 0; k < n; ++k)
    e->prefix[size_t(k) + 1] =
        e->prefix[size_t(k)] +
        document_extent(kept_length(e->order[size_t(k)]), config_.pad_documents_to);
  if (cache_.size() == 2) cache_.erase(cache_.begin());
  cache_.push_back(e);
  return e;
}

PackedSequence Sampler::sequence(int64_t index) const {
  DL_CHECK(index >= 0, "sampler", "expected a sequence index >= 0, got " << index);
  const int64_t S = config_.sequence_length, T = tokens_per_epoch_;
  const int32_t pad = config_.pad_documents_to;
  PackedSequence seq;
  seq.index = index;
  seq.tokens.reserve(size_t(S));
  seq.labels.reserve(size_t(S));
  int64_t pos = index * S;  // stream position
  seq.epoch = pos / T;
  std::vector<int32_t> buf;
  while (int64_t(seq.tokens.size()) < S) {
    auto e = epoch(pos / T);
    const int64_t r = pos % T;
    const size_t k =
        size_t(std::upper_bound(e->prefix.begin(), e->prefix.end(), r) - e->prefix.begin()) - 1;
    const int64_t doc = e->order[k];
    const int64_t offset = r - e->prefix[k];  // inside the document's extent
    const int64_t extent = e->prefix[k + 1] - e->prefix[k];
    const int64_t piece = std::min(extent - offset, S - int64_t(seq.tokens.size()));
    const int64_t kept = kept_length(doc);
    const int64_t real = std::clamp<int64_t>(kept - offset, 0, piece);
    // Real tokens plus the next one (the label of the piece's last token) when it exists.
    const int64_t with_next = std::min(real + 1, kept - offset);
    buf.resize(size_t(std::max<int64_t>(with_next, 0)));
    if (with_next > 0) dataset_.read(doc, offset, with_next, buf.data());
    for (int64_t t = 0; t < real; ++t) {
      seq.tokens.push_back(buf[size_t(t)]);
      seq.labels.push_back(t + 1 < with_next ? buf[size_t(t) + 1] : -1);
    }
    for (int64_t t = real; t < piece; ++t) {
      seq.tokens.push_back(dataset_.end_of_text());
      seq.labels.push_back(-1);
    }
    DL_CHECK(document_extent(real, pad) == piece, "sampler",
             "internal: piece of " << piece << " tokens holds " << real << " real tokens");
    seq.document_lengths.push_back(int32_t(real));
    seq.source_documents.push_back(doc);
    seq.source_offsets.push_back(offset);
    pos += piece;
  }
  return seq;
}

GlobalBatch Sampler::batch(int64_t step) const {
  DL_CHECK(step >= 0, "sampler", "expected step >= 0, got " << step);
  GlobalBatch b;
  b.step = step;
  for (int64_t s = 0; s < config_.sequences; ++s) {
    b.sequences.push_back(sequence(step * config_.sequences + s));
    b.loss_tokens += b.sequences.back().loss_tokens();
  }
  return b;
}

ModelInput make_model_input(const PackedSequence& sequence, const SequencePart& slice,
                            int32_t pad_documents_to) {
  ModelInput in = length_model(sequence.document_lengths, slice, pad_documents_to);
  DL_CHECK(in.sequence_length == int64_t(sequence.tokens.size()), "sampler",
           "expected document lengths to add up to " << sequence.tokens.size() << " tokens, got "
                                                     << in.sequence_length);
  const auto q0 = sequence.tokens.begin() + in.query_begin;
  const auto q1 = sequence.tokens.begin() + in.query_end;
  in.tokens.assign(q0, q1);
  in.labels.assign(sequence.labels.begin() + in.query_begin,
                   sequence.labels.begin() + in.query_end);
  in.loss_mask.resize(in.labels.size());
  for (size_t t = 0; t < in.labels.size(); ++t) in.loss_mask[t] = in.labels[t] >= 0 ? 1 : 0;
  return in;
}

}  // namespace driftless::data
