// The attention spec of a slice and the cut of QKV, shared by the routes (route.h).
#include <algorithm>

#include "engine/core/error.h"
#include "engine/ops/ops.h"
#include "layers/attention/routes/route.h"

namespace driftless::layers {

AttentionSpec spec_from_input(const data::ModelInput& in) {
  AttentionSpec s;
  s.causal = true;
  if (in.padded()) {
    s.cu_seqlens_q = Tensor::from_vector(in.cu_seqlens_q_padded);
    s.cu_seqlens_k = Tensor::from_vector(in.cu_seqlens_k_padded);
    s.seqused_q = Tensor::from_vector(in.seqused_q);
    s.seqused_k = Tensor::from_vector(in.seqused_k);
  } else {
    s.cu_seqlens_q = Tensor::from_vector(in.cu_seqlens_q);
    s.cu_seqlens_k = Tensor::from_vector(in.cu_seqlens_k);
  }
  s.max_seqlen_q = std::max<int64_t>(in.max_seqlen_q, 1);
  s.max_seqlen_k = std::max<int64_t>(in.max_seqlen_k, 1);
  return s;
}

AttentionSpec merge_specs(const std::vector<AttentionSpec>& parts,
                          const std::vector<int64_t>& k_rows) {
  if (parts.size() == 1) return parts[0];
  const bool padded = parts[0].seqused_q.defined();
  std::vector<int32_t> cu_q{0}, cu_k{0}, used_q, used_k;
  int32_t q_off = 0, k_off = 0;
  AttentionSpec m;
  m.causal = parts[0].causal;
  for (size_t i = 0; i < parts.size(); ++i) {
    const AttentionSpec& p = parts[i];
    DL_CHECK(p.seqused_q.defined() == padded && p.causal == m.causal, "attention route",
             "sequences of one slice differ in padding or masking");
    const auto cq = p.cu_seqlens_q.to_vector<int32_t>(), ck = p.cu_seqlens_k.to_vector<int32_t>();
    for (size_t d = 1; d < cq.size(); ++d) cu_q.push_back(q_off + cq[d]);
    for (size_t d = 1; d < ck.size(); ++d) cu_k.push_back(k_off + ck[d]);
    if (padded) {
      for (int32_t u : p.seqused_q.to_vector<int32_t>()) used_q.push_back(u);
      for (int32_t u : p.seqused_k.to_vector<int32_t>()) used_k.push_back(u);
    }
    q_off += cq.back();
    k_off += int32_t(k_rows[i]);
    DL_CHECK(ck.back() == k_rows[i], "attention route",
             "cu_seqlens_k of sequence " << i << " ends at " << ck.back() << ", its K extent has "
                                         << k_rows[i] << " rows");
    m.max_seqlen_q = std::max(m.max_seqlen_q, p.max_seqlen_q);
    m.max_seqlen_k = std::max(m.max_seqlen_k, p.max_seqlen_k);
  }
  m.cu_seqlens_q = Tensor::from_vector(cu_q);
  m.cu_seqlens_k = Tensor::from_vector(cu_k);
  if (padded) {
    m.seqused_q = Tensor::from_vector(used_q);
    m.seqused_k = Tensor::from_vector(used_k);
  }
  return m;
}

QkvParts split_qkv(const Tensor& qkv, int64_t H, int64_t Hkv, int64_t D) {
  const int64_t T = qkv.size(0);
  auto parts = ops::split(qkv, {H * D, Hkv * D, Hkv * D}, 1);
  return {ops::reshape(parts[0], {T, H, D}), ops::reshape(parts[1], {T, Hkv, D}),
          ops::reshape(parts[2], {T, Hkv, D})};
}

}  // namespace driftless::layers
