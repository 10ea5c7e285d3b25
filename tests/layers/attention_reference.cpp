// Dense float64 reference (see attention_reference.h): explicit mask, two-pass softmax.
#include "tests/layers/attention_reference.h"

#include <cmath>
#include <limits>

namespace driftless::testing {

namespace {
bool visible(const RefProblem& p, int64_t i, int64_t j) {
  if (p.doc_q[i] < 0 || p.doc_q[i] != p.doc_k[j]) return false;
  const int64_t qp = p.pos_q[i], kp = p.pos_k[j];
  if (p.causal && kp > qp) return false;
  if (p.window_left >= 0 && kp < qp - p.window_left) return false;
  if (p.window_right >= 0 && kp > qp + p.window_right) return false;
  return true;
}
}  // namespace

RefResult reference_attention(const RefProblem& p, const std::vector<double>& dout) {
  const int64_t tq = int64_t(p.doc_q.size()), tk = int64_t(p.doc_k.size());
  const int64_t H = p.heads, Hkv = p.kv_heads, D = p.head_dim, G = H / Hkv;
  const double inf = std::numeric_limits<double>::infinity();
  const bool has_bias = !p.bias.empty();
  auto bias_index = [&](int64_t h, int64_t i, int64_t j) {
    const int64_t hh = p.bias_shape[0] == 1 ? 0 : h, ii = p.bias_shape[1] == 1 ? 0 : i,
                  jj = p.bias_shape[2] == 1 ? 0 : j;
    return (hh * p.bias_shape[1] + ii) * p.bias_shape[2] + jj;
  };
  RefResult r;
  r.out.assign(size_t(tq * H * D), 0.0);
  r.lse.assign(size_t(H * tq), -inf);
  const bool bwd = !dout.empty();
  if (bwd) {
    r.dq.assign(p.q.size(), 0.0);
    r.dk.assign(p.k.size(), 0.0);
    r.dv.assign(p.v.size(), 0.0);
    r.dbias.assign(p.bias.size(), 0.0);
    r.dparams.assign(size_t(p.mod.param_count), 0.0);
  }
  const size_t ntk = static_cast<size_t>(tk);
  std::vector<double> s0(ntk), s(ntk), pr(ntk), dp(ntk);
  std::vector<char> mask(ntk);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kh = h / G;
    for (int64_t i = 0; i < tq; ++i) {
      const double* qi = &p.q[size_t((i * H + h) * D)];
      double mx = -inf;
      for (int64_t j = 0; j < tk; ++j) {
        mask[j] = visible(p, i, j);
        if (!mask[j]) continue;
        const double* kj = &p.k[size_t((j * Hkv + kh) * D)];
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
        s0[j] = p.scale * dot + (has_bias ? p.bias[size_t(bias_index(h, i, j))] : 0.0);
        s[j] = p.mod.value ? p.mod.value(s0[j], p.doc_q[i], int(h), p.pos_q[i], p.pos_k[j]) : s0[j];
        mx = std::max(mx, s[j]);
      }
      if (mx == -inf) continue;  // sees no key (or only -inf scores): out 0, lse -inf
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j)
        if (mask[j]) sum += std::exp(s[j] - mx);
      const double lse = mx + std::log(sum);
      r.lse[size_t(h * tq + i)] = lse;
      double* oi = &r.out[size_t((i * H + h) * D)];
      for (int64_t j = 0; j < tk; ++j) {
        pr[j] = mask[j] ? std::exp(s[j] - lse) : 0.0;
        if (!mask[j]) continue;
        const double* vj = &p.v[size_t((j * Hkv + kh) * D)];
        for (int64_t d = 0; d < D; ++d) oi[d] += pr[j] * vj[d];
      }
      if (!bwd) continue;
      const double* doi = &dout[size_t((i * H + h) * D)];
      double pdp = 0;
      for (int64_t j = 0; j < tk; ++j) {
        if (!mask[j]) continue;
        const double* vj = &p.v[size_t((j * Hkv + kh) * D)];
        dp[j] = 0;
        for (int64_t d = 0; d < D; ++d) dp[j] += doi[d] * vj[d];
        pdp += pr[j] * dp[j];
      }
      for (int64_t j = 0; j < tk; ++j) {
        if (!mask[j]) continue;
        const double ds = pr[j] * (dp[j] - pdp);
        const int b = p.doc_q[i];
        if (p.mod.param_grad)
          p.mod.param_grad(ds, s0[j], b, int(h), p.pos_q[i], p.pos_k[j], r.dparams);
        const double ds0 =
            ds *
            (p.mod.derivative ? p.mod.derivative(s0[j], b, int(h), p.pos_q[i], p.pos_k[j]) : 1.0);
        if (has_bias) r.dbias[size_t(bias_index(h, i, j))] += ds0;
        const int64_t ko = (j * Hkv + kh) * D;
        for (int64_t d = 0; d < D; ++d) {
          r.dq[size_t((i * H + h) * D + d)] += p.scale * ds0 * p.k[size_t(ko + d)];
          r.dk[size_t(ko + d)] += p.scale * ds0 * qi[d];
          r.dv[size_t(ko + d)] += pr[j] * doi[d];
        }
      }
    }
  }
  return r;
}

}  // namespace driftless::testing
