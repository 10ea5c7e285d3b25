// Shared by the model tests: a tiny GPT-2 (GQA 4:2), packed sequences of given document
// lengths with random tokens, packed sequences as reference-file tensors, and the drift
// metric over two gradient slabs.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/sampler.h"
#include "layers/gpt_config.h"

namespace driftless::layers::test_util {

inline GptConfig tiny_gpt_config(int64_t vocab_size = 37, int64_t n_positions = 64) {
  GptConfig c;
  c.vocab_size = vocab_size;
  c.n_positions = n_positions;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 16;
  return c;
}

// Documents of `lengths` back to back, tokens uniform in [0, vocab), labels the next token of
// the same document (-1 at each document's end).
inline data::PackedSequence packed(const std::vector<int32_t>& lengths, int64_t vocab,
                                   uint64_t seed) {
  data::PackedSequence s;
  s.document_lengths = lengths;
  int64_t S = 0;
  for (int32_t l : lengths) S += l;
  Tensor r = Tensor::uniform({S}, seed, 0, double(vocab));
  for (int64_t i = 0; i < S; ++i) s.tokens.push_back(int32_t(r.at({i})));
  int64_t pos = 0;
  for (int32_t l : lengths) {
    for (int32_t j = 0; j < l; ++j) s.labels.push_back(j + 1 < l ? s.tokens[pos + j + 1] : -1);
    pos += l;
  }
  return s;
}

// Packed sequences of one length S as the tensors of a reference input file (read by
// tests/reference/*.py): <prefix>tokens and <prefix>labels (B, S), <prefix>document_lengths
// (every sequence's documents in order) and <prefix>document_counts (B).
inline std::vector<std::pair<std::string, Tensor>> packed_tensors(
    const std::vector<data::PackedSequence>& sequences, const std::string& prefix = "") {
  std::vector<int32_t> tokens, labels, lengths, counts;
  for (const auto& s : sequences) {
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    labels.insert(labels.end(), s.labels.begin(), s.labels.end());
    lengths.insert(lengths.end(), s.document_lengths.begin(), s.document_lengths.end());
    counts.push_back(int32_t(s.document_lengths.size()));
  }
  const int64_t B = int64_t(sequences.size()), S = int64_t(sequences[0].tokens.size());
  return {{prefix + "tokens", Tensor::from_vector(tokens, {B, S})},
          {prefix + "labels", Tensor::from_vector(labels, {B, S})},
          {prefix + "document_lengths", Tensor::from_vector(lengths)},
          {prefix + "document_counts", Tensor::from_vector(counts)}};
}

// rms(t - r) / rms(r) (ARCHITECTURE.md "Drift metric").
inline double rms_rel(const std::vector<float>& t, const std::vector<float>& r) {
  double d = 0, s = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    d += (double(t[i]) - r[i]) * (double(t[i]) - r[i]);
    s += double(r[i]) * r[i];
  }
  return std::sqrt(d / (s + 1e-30));
}

}  // namespace driftless::layers::test_util
