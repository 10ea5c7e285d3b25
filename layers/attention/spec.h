// AttentionSpec: everything about one varlen attention call besides q, k, v (ARCHITECTURE.md
// "Canonical varlen layout", "Padding between sequences", "Score modifiers"), and
// validate(), which checks all of it before any work and resolves it into per-document
// spans the kernels iterate over.
//
// Layout. cu_seqlens_q / cu_seqlens_k are i32 prefix sums [N + 1] starting at 0. Without
// padding they are both the memory offsets and the lengths, and end at T_q / T_k.
// Padding, two accepted conventions (both give offsets and real lengths per document):
//   * cu_seqlens_*_padded given: it holds the memory offsets (ends at T), and the real
//     lengths are diff(cu_seqlens_*) (TransformerEngine), or seqused_* when that is given
//     too (then the two must agree).
//   * only seqused_* given: cu_seqlens_* are the offsets, seqused_* the real lengths
//     (FlashAttention 3).
// Rows of a document past its real length are padding: never visible, written as 0.
// The K extent handed to attention starts at first_document_begin, so cu_seqlens_k index
// into it; nothing before it exists for attention.
// Positions. A modifier or mask sees a pair as (q_idx, k_idx), positions inside the document:
// key row j is at j, query row i at i + n_k - n_q (bottom-right, ARCHITECTURE.md "Causal
// alignment"), i.e. the token's place in its document when the call's keys start at the
// document start. A call that holds only part of its first document says so in
// first_doc_shift. (No route makes such calls: the ring's calls start their keys at the
// first document's start. The shift serves direct callers and replays.)
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/core/tensor.h"
#include "layers/attention/score_mod.h"

namespace driftless::layers {

namespace expr {
struct Program;
}

// A built-in score modifier as the user gives it: its kind (score_mod.h) and its parameters
// as tensors, which own their memory and carry autograd. bind_score_mod turns it into the
// ScoreModDesc the kernels read. User-defined functors go through the templates in
// attention.h instead.
struct ScoreModSpec {
  ScoreModKind kind = ScoreModKind::none;
  double softcap = 0.0;            // cap > 0
  Tensor alibi_slopes;             // (H) floating, not learnable
  Tensor relative_position_table;  // (H, 2 * max_distance + 1) floating, learnable
  int64_t relative_position_max_distance = 0;
  // expression: a checked score expression (null: the identity) and/or mask expression
  // (null: no mask), their parameters (one tensor per declared parameter, in declaration
  // order; learnable ones carry autograd) and the global head of the call's head 0 (a2a
  // calls hold heads [head_offset, head_offset + H) of the model's).
  std::shared_ptr<const expr::Program> expression, mask;
  std::vector<Tensor> expression_params;
  int64_t head_offset = 0;

  static ScoreModSpec none() { return {}; }
  static ScoreModSpec make_softcap(double cap);
  static ScoreModSpec make_alibi(Tensor slopes);
  static ScoreModSpec make_relative_position(Tensor table, int64_t max_distance);
  static ScoreModSpec make_expression(std::shared_ptr<const expr::Program> score,
                                      std::shared_ptr<const expr::Program> mask,
                                      std::vector<Tensor> params, int64_t head_offset = 0);
};

// The learnable parameters of an expression modifier, in declaration order (empty for the
// other kinds); and the flat gradient of attention (AttentionGrads::dscore_mod) cut into
// one tensor per learnable parameter, of its shape and dtype.
std::vector<Tensor> expression_learnables(const ScoreModSpec& m);
std::vector<Tensor> split_expression_grad(const ScoreModSpec& m, const Tensor& flat);

const char* score_mod_name(ScoreModKind kind);

// A ScoreModDesc in compute type T and the tensors its pointers point into (the spec's
// parameters converted to T on the kernels' device); the pointers are valid while this, or
// a copy of it, lives.
template <class T>
struct BoundScoreMod {
  ScoreModDesc<T> desc;
  Tensor alibi_slopes, relative_position_table;
  std::vector<Tensor> expression_params;  // expression: each parameter in T, contiguous
};

// The description of m for kernels computing in T (float or double) on `device`. Throws
// "[attention] ..." for a kind outside ScoreModKind; the parameters are checked by validate().
template <class T>
BoundScoreMod<T> bind_score_mod(const ScoreModSpec& m, Device device);

// Added to q_idx and k_idx of document 0 of a call (spec.h "Positions"); visibility (causal,
// windows) stays the call's own. Only the first document of a call can start before it.
struct PositionShift {
  int64_t q = 0, k = 0;
  bool zero() const { return q == 0 && k == 0; }
};

// True when m's value or visibility depends on q_idx or k_idx (ALiBi, relative positions, an
// expression of q or k, any mask expression): only then does a PositionShift matter.
bool reads_positions(const ScoreModSpec& m);

struct AttentionSpec {
  Tensor cu_seqlens_q;         // (N + 1) i32
  Tensor cu_seqlens_k;         // (N + 1) i32
  int64_t max_seqlen_q = 0;    // >= every real query length
  int64_t max_seqlen_k = 0;    // >= every real key length
  Tensor cu_seqlens_q_padded;  // optional (N + 1) i32 memory offsets
  Tensor cu_seqlens_k_padded;
  Tensor seqused_q;  // optional (N) i32 real lengths
  Tensor seqused_k;
  bool causal = false;       // bottom-right aligned
  int64_t window_left = -1;  // -1: unbounded
  int64_t window_right = -1;
  std::optional<double> softmax_scale;  // default 1 / sqrt(D)
  ScoreModSpec score_mod;
  PositionShift first_doc_shift;  // the first document's positions; see "Positions" above
  // Optional additive bias, (H | 1, T_q | 1, T_k | 1) floating, learnable; indexed by the
  // memory rows of q and of the K extent. Added to the scaled score before the modifier.
  Tensor bias;
  // false: the CUDA backward may sum dQ with atomic adds inside the dK/dV kernel (Hopper
  // wgmma kernels): faster, but the bits of dQ vary from run to run. training.deterministic.
  bool deterministic = true;

  // Unpadded spec from per-document lengths (q_lens[i] queries over k_lens[i] keys).
  static AttentionSpec from_lengths(const std::vector<int64_t>& q_lens,
                                    const std::vector<int64_t>& k_lens, bool causal);
};

// One document of a call: memory offset and real length of its q rows and k rows.
struct DocSpan {
  int64_t q_offset, q_len, k_offset, k_len;
};

// A validated call, in the form the kernels use.
struct ResolvedAttention {
  std::vector<DocSpan> docs;
  int64_t t_q = 0, t_k = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double scale = 1.0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  PositionShift first_doc_shift;
};

// Checks spec against q (T_q, H, D), k and v (T_k, H_kv, D) and throws driftless::Error
// "[attention] ..." naming the offending index and values. Does no other work.
ResolvedAttention validate(const AttentionSpec& spec, const Tensor& q, const Tensor& k,
                           const Tensor& v);

}  // namespace driftless::layers
