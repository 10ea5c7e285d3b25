// The all-to-all route (all_to_all_route.h).
#include "layers/attention/routes/all_to_all_route.h"

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"
#include "layers/attention/attention.h"
#include "layers/attention/routes/buffer_route.h"

namespace driftless::layers {

namespace {
constexpr const char* kOp = "context_parallel";
}  // namespace

namespace {

// Column groups of x (T, C): group g is [offset_g, offset_g + width_g), cut into P blocks.
struct ColumnGroups {
  std::vector<int64_t> offset, width;
  int64_t block_width(int64_t P) const {
    int64_t w = 0;
    for (int64_t x : width) w += x / P;
    return w;
  }
};

// Group i of x (T, C) as (P, T, b_i): its P blocks of b_i = width_i / P columns, block p
// at [p]. A view of x (columns_of writes through it): the group's columns have strides
// (C, 1), which split into (C, b_i, 1) without a copy.
Tensor group_blocks(const Tensor& x, const ColumnGroups& g, size_t i, int64_t P) {
  const int64_t b = g.width[i] / P;
  const Tensor cols = x.narrow(1, g.offset[i], g.width[i]);
  const Tensor split = cols.reshape({x.size(0), P, b});
  DL_CHECK(split.raw_data() == cols.raw_data(), kOp, "internal: a2a column blocks are not a view");
  return split.permute({1, 0, 2});
}

// x (T, C) -> (P, T, w): slice p holds block p of every group side by side. One strided copy
// a group (three for QKV, one for the output), not one a block.
Tensor blocks_of(const Tensor& x, const ColumnGroups& g, int64_t P) {
  Tensor out = Tensor::empty({P, x.size(0), g.block_width(P)}, x.dtype(), x.device());
  int64_t at = 0;
  for (size_t i = 0; i < g.offset.size(); ++i) {
    const int64_t b = g.width[i] / P;
    out.narrow(2, at, b).copy_(group_blocks(x, g, i, P));
    at += b;
  }
  return out;
}

// The inverse of blocks_of: (P, T, w) -> (T, C).
Tensor columns_of(const Tensor& blocks, const ColumnGroups& g, int64_t C) {
  const int64_t P = blocks.size(0);
  Tensor out = Tensor::empty({blocks.size(1), C}, blocks.dtype(), blocks.device());
  int64_t at = 0;
  for (size_t i = 0; i < g.offset.size(); ++i) {
    const int64_t b = g.width[i] / P;
    group_blocks(out, g, i, P).copy_(blocks.narrow(2, at, b));
    at += b;
  }
  return out;
}

// x (T, C) of n sequences' local rows -> (n L, w) with L = P T / n: all-to-all of the
// column blocks, then the rows of every sequence in rank order.
Tensor to_heads(const Tensor& x, const ColumnGroups& g, int64_t n, KvExchange& ex) {
  const int64_t P = ex.ranks(), T = x.size(0), w = g.block_width(P);
  Tensor in = blocks_of(x, g, P);  // (P, T, w)
  Tensor got = Tensor::empty({P, n, T / n, w}, x.dtype(), x.device());
  ex.all_to_all(got, in);  // slice p: rank p's rows of my heads
  return got.permute({1, 0, 2, 3}).contiguous().view({P * T, w});
}

// The inverse of to_heads: (n L, w) -> (T, C).
Tensor to_tokens(const Tensor& y, const ColumnGroups& g, int64_t n, int64_t C, KvExchange& ex) {
  const int64_t P = ex.ranks(), T = y.size(0) / P, w = y.size(1);
  Tensor in = y.view({n, P, T / n, w}).permute({1, 0, 2, 3}).contiguous();  // (P, n, T/n, w)
  Tensor got = Tensor::empty({P, T, w}, y.dtype(), y.device());
  ex.all_to_all(got, in);
  return columns_of(got, g, C);
}

void check_a2a(const Tensor& x, int64_t n) {
  DL_CHECK(x.defined() && x.dim() == 2 && n >= 1 && x.size(0) % n == 0, kOp,
           "a2a input must be (T, C) with T divisible by the "
               << n << " sequences, got " << (x.defined() ? shape_str(x.shape()) : "undefined"));
}

// One autograd node for a pair of mutually inverse layouts.
Tensor layout_node(const char* name, const Tensor& x, Tensor y,
                   std::function<Tensor(const Tensor&)> backward) {
  autograd::Context ctx;
  return autograd::record(name, {x}, y, std::move(ctx),
                          [backward](autograd::Context&, const std::vector<Tensor>& g) {
                            autograd::NoGradGuard no_grad;
                            return std::vector<Tensor>{backward(g[0].contiguous())};
                          });
}

ColumnGroups qkv_groups(int64_t H, int64_t Hkv, int64_t D) {
  return {{0, H * D, (H + Hkv) * D}, {H * D, Hkv * D, Hkv * D}};
}

}  // namespace

Tensor tokens_to_heads(const Tensor& qkv, int64_t n, int64_t H, int64_t Hkv, KvExchange& ex) {
  check_a2a(qkv, n);
  const int64_t P = ex.ranks(), C = qkv.size(1);
  DL_CHECK(H % P == 0 && Hkv % P == 0 && C % (H + 2 * Hkv) == 0, kOp,
           "a2a needs n_head (" << H << ") and n_kv_head (" << Hkv << ") divisible by " << P
                                << " ranks and qkv columns (" << C << ") = (H + 2 H_kv) D");
  const ColumnGroups g = qkv_groups(H, Hkv, C / (H + 2 * Hkv));
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = to_heads(qkv, g, n, ex);
  }
  KvExchange* e = &ex;
  return layout_node("a2a_tokens_to_heads", qkv, y,
                     [g, n, C, e](const Tensor& dy) { return to_tokens(dy, g, n, C, *e); });
}

Tensor heads_to_tokens(const Tensor& y, int64_t n, KvExchange& ex) {
  check_a2a(y, n);
  const int64_t P = ex.ranks(), C = y.size(1) * P;
  const ColumnGroups g{{0}, {C}};
  Tensor x;
  {
    autograd::NoGradGuard no_grad;
    x = to_tokens(y.contiguous(), g, n, C, ex);
  }
  KvExchange* e = &ex;
  return layout_node("a2a_heads_to_tokens", y, x,
                     [g, n, e](const Tensor& dx) { return to_heads(dx, g, n, *e); });
}

int64_t AllToAllRoute::buffer_kv_heads(const AttentionShape& shape) const {
  const int64_t P = exchange().ranks();
  DL_CHECK(shape.kv_heads % P == 0, "all-to-all route",
           "n_kv_head " << shape.kv_heads << " does not divide into " << P << " head groups");
  return shape.kv_heads / P;
}

Tensor AllToAllRoute::attend(const RouteCall& call, const Tensor& qkv) {
  KvExchange& ex = exchange();
  const std::vector<PartInput>& slice = *call.slice;
  const int64_t H = call.shape.heads, Hkv = call.shape.kv_heads, D = call.shape.head_dim;
  const int64_t P = ex.ranks(), n = int64_t(slice.size()), Hp = H / P, Hkvp = Hkv / P;
  KvBuffer& buffer = this->buffer(call.layer);
  // This rank's heads over every row of the micro-sequence.
  Tensor heads = tokens_to_heads(qkv, n, H, Hkv, ex);  // (n L, (Hp + 2 Hkvp) D)
  const int64_t L = heads.size(0) / n;
  auto parts = ops::split(heads, {Hp * D, Hkvp * D, Hkvp * D}, 1);
  Tensor q = ops::reshape(parts[0], {n * L, Hp, D});
  const std::vector<int64_t> rows_of(size_t(n), L);
  const std::vector<Tensor> k_q = ops::split(ops::reshape(parts[1], {n * L, Hkvp, D}), rows_of, 0);
  const std::vector<Tensor> v_q = ops::split(ops::reshape(parts[2], {n * L, Hkvp, D}), rows_of, 0);
  std::vector<AttentionSpec> specs;
  std::vector<int64_t> k_rows;
  std::vector<Tensor> k_parts, v_parts;
  for (int64_t j = 0; j < n; ++j) {
    const data::ModelInput* w = slice[size_t(j)].whole.get();
    const data::ModelInput& local = *slice[size_t(j)].input;
    DL_CHECK(w && w->num_queries() == L, "all-to-all route",
             "sequence " << j << " needs its whole micro-sequence of " << L << " rows");
    DL_CHECK(local.chunks == P && local.chunk == ex.rank() &&
                 local.micro_sequence == w->micro_sequence &&
                 local.query_begin == w->query_begin + ex.rank() * (L / P),
             "all-to-all route",
             "sequence " << j << " must hold chunk " << ex.rank() << " of " << P
                         << " of micro-sequence " << w->micro_sequence << ", got chunk "
                         << local.chunk << " of " << local.chunks << " of micro-sequence "
                         << local.micro_sequence);
    specs.push_back(spec_from_input(*w));
    k_rows.push_back(w->num_keys());
    // The buffer holds this rank's heads of every row: one rank's exchange, no collective.
    auto [k_ext, v_ext] = kv_write_read(
        buffer,
        KvRows{slice[size_t(j)].slot, w->query_begin, w->query_end, w->first_document_begin, -1},
        k_q[size_t(j)], v_q[size_t(j)]);
    k_parts.push_back(k_ext);
    v_parts.push_back(v_ext);
  }
  AttentionSpec spec = merge_specs(specs, k_rows);
  spec.deterministic = call.deterministic;
  spec.window_left = call.window_left;
  spec.score_mod = call.score_mod(ex.rank() * Hp, Hp);
  Tensor y = attention(q, n == 1 ? k_parts[0] : ops::concat(k_parts, 0),
                       n == 1 ? v_parts[0] : ops::concat(v_parts, 0), spec);  // (n L, Hp, D)
  return heads_to_tokens(ops::reshape(y, {n * L, Hp * D}), n, ex);
}

}  // namespace driftless::layers
