// Autoregressive generation with a buffer route's per-layer K/V buffers as the cache
// (ARCHITECTURE.md "K/V buffers": the same buffer serves generation). The prompt is prefilled in
// one call over [0, n); each new token then runs alone as the slice [pos, pos + 1) and attends over
// the buffer's [0, pos + 1): the past is never recomputed.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "layers/attention/routes/buffer_route.h"
#include "layers/gpt.h"

namespace driftless::layers {

// One sequence, one document, no loss: the ModelInput of query rows [q0, q1) of a sequence of
// `sequence_length` tokens whose K extent is [0, q1). `tokens` holds the q1 - q0 new tokens.
data::ModelInput generation_input(std::span<const int32_t> tokens, int64_t q0,
                                  int64_t sequence_length);

// Runs `tokens` as rows [q0, q0 + tokens.size()) of cache slot 0 (writing their K/V into the
// cache's buffers, prepared with model.prepare_route for at least q0 + tokens.size()
// positions; rows [0, q0) must already be there) and returns the logits of the last row:
// (V). No autograd graph is built.
std::vector<float> forward_cached(Gpt& model, BufferRoute& cache, std::span<const int32_t> tokens,
                                  int64_t q0);

// The logits of `documents` packed into one sequence, exactly as training sees a packed
// batch (data::make_model_input): positions restart at every document and each document
// attends only within itself. Returns (sum of lengths, V), rows in document order. Each
// document must be non-empty, fit model.config().n_positions and hold ids < vocab_size.
Tensor packed_logits(Gpt& model, const std::vector<std::vector<int32_t>>& documents);

// The next token from logits (V): the argmax when top_k == 1 or temperature == 0, otherwise
// a draw from softmax(logits / temperature) restricted to the top_k largest (top_k <= 0: all),
// using the counter-based RNG at (seed, counter) so a run is reproducible.
int32_t choose_token(std::span<const float> logits, int64_t top_k, double temperature,
                     uint64_t seed, uint64_t counter);

// Generates up to max_new_tokens after the prompt (at least one token) and returns only the
// new ones. Stops after producing end_of_text (when >= 0; it is not returned) or when the
// sequence reaches model.config().n_positions. on_token, when set, sees every returned token
// as soon as it is chosen (for streaming output).
std::vector<int32_t> generate(Gpt& model, std::span<const int32_t> prompt_tokens,
                              int64_t max_new_tokens, int64_t top_k, double temperature,
                              uint64_t seed, int32_t end_of_text = -1,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace driftless::layers
