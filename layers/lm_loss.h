// The tied LM head and the masked cross-entropy as one autograd node (ARCHITECTURE.md data
// flow "loss (sum over real tokens, scaled by 1 / tokens in the global batch)"). Rows are
// processed in chunks, so no more than one chunk of fp32 logits exists.
#pragma once
#include <cstdint>

#include "engine/core/tensor.h"

namespace driftless::layers {

// Byte budget of one chunk of fp32 logits (chunk_rows x V x 4). On cuda the chunk's
// dlogits go, in the operand dtype, into a buffer of kLmLossGradChunks chunks (bf16: 2 x
// half the budget): the transient peak is about 2 x the budget, 1 GiB, instead of T x V x 4
// twice (3.3 GB each for 16k tokens of GPT-2's 50257). 500 MiB is 2560 rows of GPT-2:
// every chunk's logits product reads all of W (77 MB for GPT-2), so fewer, larger chunks
// move less and run fewer, larger products and cross-entropy launches. 2560-row chunks in
// pairs measured fastest for their peak memory (BENCHMARKS.md, GPT-2 training steps).
constexpr int64_t kLmLossChunkBytes = int64_t(500) << 20;

// Chunks whose dlogits (in the operand dtype) are kept side by side on cuda so that one dx
// and one dW product cover them: the (V, C) f32 dW that every accumulating product reads
// and writes (308 MB of traffic for GPT-2) is paid once per 2 chunks (5120 GPT-2 rows),
// not per chunk.
constexpr int64_t kLmLossGradChunks = 2;

// Rows per chunk for a vocabulary of v: as many as fit the budget (a multiple of 64 when
// that is at least 64), at least 1.
int64_t lm_loss_chunk_rows(int64_t v);

// x (T, C), weight (V, C) (the tied embedding) of one dtype: f32 or f64, or bf16 on cuda;
// labels (T) i32/i64 in [0, V) on any device (out of range is an error even where masked);
// loss_mask (T) floating or undefined (all ones) -> () loss_scale * sum_t mask_t *
// (logsumexp(x_t W^T) - (x_t W^T)[labels_t]), f32 whatever the compute dtype (f64 for f64).
// chunk_rows 0 takes lm_loss_chunk_rows(V). Gradients flow to x and weight (not the mask).
//
// With grad enabled the forward also computes, chunk by chunk, dlogits = (softmax - onehot)
// * mask * loss_scale, dx = dlogits W and dW = sum over chunks of dlogits^T x, in fp32, and
// saves dx and dW (not the logits); the backward scales them by the upstream gradient.
// Without grad (evaluation) it computes the loss only.
//
// recompute: the forward computes the loss only and saves its inputs; the backward runs
// the chunks again (one more logits product) to make dx and dW. For several forwards in
// flight before their backwards (micro-sequences, breadth-first micro-batches), where a
// saved (V, C) f32 dW per forward (154 MB for GPT-2) would eat what they save.
Tensor lm_loss(const Tensor& x, const Tensor& weight, const Tensor& labels, const Tensor& loss_mask,
               double loss_scale, int64_t chunk_rows = 0, bool recompute = false);

}  // namespace driftless::layers
