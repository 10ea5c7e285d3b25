// Generation over the K/V cache (generate.h).
#include "layers/generate.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "data/sampler.h"
#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/core/random.h"

namespace driftless::layers {

data::ModelInput generation_input(std::span<const int32_t> tokens, int64_t q0,
                                  int64_t sequence_length) {
  const int64_t tq = int64_t(tokens.size()), q1 = q0 + tq;
  DL_CHECK(tq > 0 && q0 >= 0 && q1 <= sequence_length, "generate",
           "rows [" << q0 << ", " << q1 << ") do not fit a sequence of " << sequence_length);
  data::ModelInput in;
  in.sequence_length = sequence_length;
  in.query_begin = q0;
  in.query_end = q1;
  in.first_document_begin = 0;
  in.tokens.assign(tokens.begin(), tokens.end());
  in.labels.assign(size_t(tq), -1);
  in.loss_mask.assign(size_t(tq), 0);
  in.position_index.resize(size_t(tq));
  std::iota(in.position_index.begin(), in.position_index.end(), int32_t(q0));
  in.document_index_q.assign(size_t(tq), 0);
  in.document_index_k.assign(size_t(q1), 0);
  in.document_ids = {0};
  in.cu_seqlens_q = in.cu_seqlens_q_padded = {0, int32_t(tq)};
  in.cu_seqlens_k = in.cu_seqlens_k_padded = {0, int32_t(q1)};
  in.seqused_q = {int32_t(tq)};
  in.seqused_k = {int32_t(q1)};
  in.max_seqlen_q = in.max_seqlen_q_padded = int32_t(tq);
  in.max_seqlen_k = in.max_seqlen_k_padded = int32_t(q1);
  return in;
}

std::vector<float> forward_cached(Gpt& model, BufferRoute& cache, std::span<const int32_t> tokens,
                                  int64_t q0) {
  autograd::NoGradGuard no_grad;
  auto in = std::make_shared<const data::ModelInput>(
      generation_input(tokens, q0, q0 + int64_t(tokens.size())));
  ForwardOptions o;
  o.training = false;
  o.route = &cache;
  Tensor logits = model.logits({{in, 0, 0}}, o);  // (T_q, V)
  return logits.narrow(0, logits.size(0) - 1, 1).to_vector<float>();
}

Tensor packed_logits(Gpt& model, const std::vector<std::vector<int32_t>>& documents) {
  const GptConfig& c = model.config();
  DL_CHECK(!documents.empty(), "generate", "expected at least one document, got none");
  data::PackedSequence seq;
  for (size_t d = 0; d < documents.size(); ++d) {
    const auto& doc = documents[d];
    DL_CHECK(!doc.empty() && int64_t(doc.size()) <= c.n_positions, "generate",
             "document " << d << " has " << doc.size() << " tokens, expected 1 to n_positions ("
                         << c.n_positions << ")");
    for (int32_t t : doc)
      DL_CHECK(
          t >= 0 && t < c.vocab_size, "generate",
          "document " << d << ": token " << t << " outside the vocabulary of " << c.vocab_size);
    seq.tokens.insert(seq.tokens.end(), doc.begin(), doc.end());
    seq.document_lengths.push_back(int32_t(doc.size()));
  }
  seq.labels.assign(seq.tokens.size(), -1);  // no loss
  auto in = std::make_shared<const data::ModelInput>(
      data::make_model_input(seq, data::SequencePart{}, 0));
  autograd::NoGradGuard no_grad;
  ForwardOptions o;
  o.training = false;  // one whole sequence: the local route, K/V straight from QKV
  return model.logits({{in, 0, 0}}, o).to(Device::cpu, DType::f32);
}

int32_t choose_token(std::span<const float> logits, int64_t top_k, double temperature,
                     uint64_t seed, uint64_t counter) {
  const int64_t V = int64_t(logits.size());
  DL_CHECK(V > 0, "generate", "empty logits");
  DL_CHECK(temperature >= 0, "generate", "temperature must be >= 0, got " << temperature);
  if (top_k == 1 || temperature == 0)
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const int64_t k = top_k <= 0 ? V : std::min(top_k, V);
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  // Ties broken by the smaller id, so the candidate set never depends on the sort.
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const double top = logits[size_t(ids[0])];
  std::vector<double> w(static_cast<size_t>(k));
  double total = 0;
  for (int64_t i = 0; i < k; ++i)
    total += w[size_t(i)] = std::exp((double(logits[size_t(ids[size_t(i)])]) - top) / temperature);
  double u = random::uniform01(seed, counter) * total;
  for (int64_t i = 0; i < k; ++i) {
    u -= w[size_t(i)];
    if (u <= 0) return ids[size_t(i)];
  }
  return ids[size_t(k - 1)];
}

std::vector<int32_t> generate(Gpt& model, std::span<const int32_t> prompt_tokens,
                              int64_t max_new_tokens, int64_t top_k, double temperature,
                              uint64_t seed, int32_t end_of_text,
                              const std::function<void(int32_t)>& on_token) {
  const int64_t n = int64_t(prompt_tokens.size()), n_positions = model.config().n_positions;
  DL_CHECK(n > 0, "generate", "the prompt is empty (give at least one token)");
  DL_CHECK(n < n_positions, "generate",
           "the prompt has " << n << " tokens; the model holds at most " << n_positions
                             << " positions, so no room is left to generate");
  for (int32_t t : prompt_tokens)
    DL_CHECK(t >= 0 && t < model.config().vocab_size, "generate",
             "prompt token " << t << " outside the vocabulary of " << model.config().vocab_size);
  const int64_t total = std::min(n_positions, n + std::max<int64_t>(max_new_tokens, 0));
  BufferRoute cache;
  model.prepare_route(cache, 1, total);

  std::vector<int32_t> out;
  std::vector<float> logits = forward_cached(model, cache, prompt_tokens, 0);  // prefill [0, n)
  for (int64_t pos = n; pos < total; ++pos) {
    const int32_t next = choose_token(logits, top_k, temperature, seed, uint64_t(pos));
    if (next == end_of_text) break;
    out.push_back(next);
    if (on_token) on_token(next);
    if (pos + 1 < total)
      logits = forward_cached(model, cache, std::span<const int32_t>(&next, 1), pos);
  }
  return out;
}

}  // namespace driftless::layers
