// Length model: see length_model.h. One pass over the documents; every definition used
// here is stated in data/model_input.h.
#include "data/length_model.h"

#include <algorithm>

#include "engine/core/error.h"

namespace driftless::data {

int64_t document_extent(int64_t length, int32_t pad_documents_to) {
  if (pad_documents_to <= 1) return length;
  return (length + pad_documents_to - 1) / pad_documents_to * pad_documents_to;
}

namespace {
// ModelInput::exchange_rows of the span [span_begin, span_begin + L) cut into P chunks: at
// each chunk end, the rows of the document that continues past it (its readers sit after
// the end, on another rank or in a later micro-sequence), counted back to the document's
// start or the chunk's start, whichever is later; the most over the chunks.
int64_t exchange_rows(std::span<const int32_t> document_lengths, int32_t pad_documents_to,
                      int64_t span_begin, int64_t L, int64_t P) {
  const int64_t c = L / P;
  int64_t rows = 0, start = 0;
  size_t j = 0;
  for (int64_t k = 0; k < P; ++k) {
    const int64_t chunk_begin = span_begin + k * c, chunk_end = chunk_begin + c;
    // The document holding row chunk_end - 1 (documents are in order; skip those before).
    while (j < document_lengths.size() &&
           start + document_extent(document_lengths[j], pad_documents_to) < chunk_end) {
      start += document_extent(document_lengths[j], pad_documents_to);
      ++j;
    }
    if (j == document_lengths.size()) break;
    const int64_t end = start + document_extent(document_lengths[j], pad_documents_to);
    if (start < chunk_end && end > chunk_end)
      rows = std::max(rows, chunk_end - std::max(start, chunk_begin));
  }
  return rows;
}
}  // namespace

ModelInput length_model(std::span<const int32_t> document_lengths, const SequencePart& slice,
                        int32_t pad_documents_to) {
  DL_CHECK(pad_documents_to >= 0, "length_model",
           "expected pad_documents_to >= 0, got " << pad_documents_to);
  int64_t S = 0;
  for (size_t j = 0; j < document_lengths.size(); ++j) {
    DL_CHECK(document_lengths[j] >= 0, "length_model",
             "expected document lengths >= 0, got " << document_lengths[j] << " at index " << j);
    S += document_extent(document_lengths[j], pad_documents_to);
  }
  const int64_t m = slice.micro_sequences, P = slice.chunks;
  DL_CHECK(m >= 1 && slice.micro_sequence >= 0 && slice.micro_sequence < m, "length_model",
           "expected micro-sequence index in [0, " << m << "), got " << slice.micro_sequence);
  DL_CHECK(P >= 1 && slice.chunk >= 0 && slice.chunk < P, "length_model",
           "expected sdp rank in [0, " << P << "), got " << slice.chunk);
  DL_CHECK(S > 0 && S % m == 0, "length_model",
           "expected micro_sequences (" << m << ") to divide the sequence length, got " << S);
  const int64_t L = S / m;
  DL_CHECK(L % P == 0, "length_model",
           "expected sdp size (" << P << ") to divide the micro-sequence length, got " << L);

  ModelInput in;
  in.sequence_length = S;
  in.micro_sequence = slice.micro_sequence;
  in.micro_sequences = slice.micro_sequences;
  in.chunk = slice.chunk;
  in.chunks = slice.chunks;
  in.pad_documents_to = pad_documents_to;
  const int64_t q0 = slice.micro_sequence * L + slice.chunk * (L / P);
  const int64_t q1 = q0 + L / P;
  in.query_begin = q0;
  in.query_end = q1;
  in.first_document_begin = -1;
  in.cu_seqlens_q = {0};
  in.cu_seqlens_k = {0};
  in.cu_seqlens_q_padded = {0};
  in.cu_seqlens_k_padded = {0};

  int64_t start = 0;
  for (size_t j = 0; j < document_lengths.size() && start < q1; ++j) {
    const int64_t length = document_lengths[j];
    const int64_t end = start + document_extent(length, pad_documents_to);
    const int64_t real_end = start + length;
    if (end > q0) {  // has a row in [q0, q1); zero-length documents never get here
      if (in.first_document_begin < 0) in.first_document_begin = start;
      const int32_t id = int32_t(j);
      in.document_ids.push_back(id);
      const int64_t qb = std::max(start, q0), qe = std::min(end, q1);
      const int64_t ke = qe;
      const int32_t used_q = int32_t(std::max<int64_t>(0, std::min(real_end, q1) - qb));
      const int32_t used_k = int32_t(std::min(real_end, q1) - start);
      in.seqused_q.push_back(used_q);
      in.seqused_k.push_back(used_k);
      in.cu_seqlens_q.push_back(in.cu_seqlens_q.back() + used_q);
      in.cu_seqlens_k.push_back(in.cu_seqlens_k.back() + used_k);
      in.cu_seqlens_q_padded.push_back(in.cu_seqlens_q_padded.back() + int32_t(qe - qb));
      in.cu_seqlens_k_padded.push_back(in.cu_seqlens_k_padded.back() + int32_t(ke - start));
      in.max_seqlen_q = std::max(in.max_seqlen_q, used_q);
      in.max_seqlen_k = std::max(in.max_seqlen_k, used_k);
      in.max_seqlen_q_padded = std::max(in.max_seqlen_q_padded, int32_t(qe - qb));
      in.max_seqlen_k_padded = std::max(in.max_seqlen_k_padded, int32_t(ke - start));
      for (int64_t p = qb; p < qe; ++p) {
        in.position_index.push_back(int32_t(p - start));
        in.document_index_q.push_back(id);
      }
      for (int64_t p = start; p < ke; ++p) in.document_index_k.push_back(id);
    }
    start = end;
  }
  DL_CHECK(in.first_document_begin >= 0, "length_model",
           "internal: no document covers query rows [" << q0 << ", " << q1 << ")");
  in.exchange_rows = exchange_rows(document_lengths, pad_documents_to, slice.micro_sequence * L, L,
                                   P);
  return in;
}

namespace {
void check_prefix(const std::vector<int32_t>& cu, size_t n, int64_t last, const char* name) {
  DL_CHECK(cu.size() == n + 1, "length_model",
           "expected " << name << " of length num_docs + 1 = " << n + 1 << ", got " << cu.size());
  DL_CHECK(cu[0] == 0, "length_model", "expected " << name << "[0] = 0, got " << cu[0]);
  for (size_t k = 1; k < cu.size(); ++k)
    DL_CHECK(cu[k] >= cu[k - 1], "length_model",
             "expected " << name << " non-decreasing, got " << name << "[" << k << "] = " << cu[k]
                         << " < " << cu[k - 1]);
  if (last >= 0)
    DL_CHECK(cu.back() == last, "length_model",
             "expected " << name << "[-1] = " << last << ", got " << cu.back());
}
}  // namespace

void check_canonical(const ModelInput& in) {
  const size_t n = in.document_ids.size();
  const int64_t tq = in.num_queries(), tk = in.num_keys();
  check_prefix(in.cu_seqlens_q_padded, n, tq, "cu_seqlens_q_padded");
  check_prefix(in.cu_seqlens_k_padded, n, tk, "cu_seqlens_k_padded");
  check_prefix(in.cu_seqlens_q, n, in.padded() ? -1 : tq, "cu_seqlens_q");
  check_prefix(in.cu_seqlens_k, n, in.padded() ? -1 : tk, "cu_seqlens_k");
  DL_CHECK(in.seqused_q.size() == n && in.seqused_k.size() == n, "length_model",
           "expected seqused_q/k of length " << n << ", got " << in.seqused_q.size() << " and "
                                             << in.seqused_k.size());
  for (size_t k = 0; k < n; ++k) {
    const int32_t run_q = in.cu_seqlens_q_padded[k + 1] - in.cu_seqlens_q_padded[k];
    const int32_t run_k = in.cu_seqlens_k_padded[k + 1] - in.cu_seqlens_k_padded[k];
    DL_CHECK(in.seqused_q[k] >= 0 && in.seqused_q[k] <= run_q, "length_model",
             "expected seqused_q[" << k << "] in [0, " << run_q << "], got " << in.seqused_q[k]);
    DL_CHECK(
        in.seqused_k[k] >= in.seqused_q[k] && in.seqused_k[k] <= run_k, "length_model",
        "expected seqused_k[" << k << "] in [seqused_q, " << run_k << "], got " << in.seqused_k[k]);
    DL_CHECK(in.cu_seqlens_q[k + 1] - in.cu_seqlens_q[k] == in.seqused_q[k], "length_model",
             "expected cu_seqlens_q run " << k << " = seqused_q[" << k << "]");
    DL_CHECK(in.cu_seqlens_k[k + 1] - in.cu_seqlens_k[k] == in.seqused_k[k], "length_model",
             "expected cu_seqlens_k run " << k << " = seqused_k[" << k << "]");
  }
  DL_CHECK(int64_t(in.position_index.size()) == tq && int64_t(in.document_index_q.size()) == tq,
           "length_model", "expected position_index and document_index_q of length " << tq);
  DL_CHECK(int64_t(in.document_index_k.size()) == tk, "length_model",
           "expected document_index_k of length " << tk << ", got " << in.document_index_k.size());
}

}  // namespace driftless::data
