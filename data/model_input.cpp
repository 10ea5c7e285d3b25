// ModelInput helpers: tensors and JSON views (see model_input.h).
#include "data/model_input.h"

#include <nlohmann/json.hpp>

namespace driftless::data {

namespace {
Tensor i32(const std::vector<int32_t>& v) {
  return Tensor::from_vector(v);
}
}  // namespace

ModelInputTensors to_tensors(const ModelInput& in) {
  ModelInputTensors t;
  t.tokens = i32(in.tokens);
  t.labels = i32(in.labels);
  t.loss_mask = i32(in.loss_mask);
  t.position_index = i32(in.position_index);
  t.document_index_q = i32(in.document_index_q);
  t.document_index_k = i32(in.document_index_k);
  t.cu_seqlens_q = i32(in.cu_seqlens_q);
  t.cu_seqlens_k = i32(in.cu_seqlens_k);
  t.cu_seqlens_q_padded = i32(in.cu_seqlens_q_padded);
  t.cu_seqlens_k_padded = i32(in.cu_seqlens_k_padded);
  t.seqused_q = i32(in.seqused_q);
  t.seqused_k = i32(in.seqused_k);
  return t;
}

nlohmann::json to_json(const ModelInput& in) {
  nlohmann::json j;
  j["micro_sequence"] = in.micro_sequence;
  j["micro_sequences"] = in.micro_sequences;
  j["chunk"] = in.chunk;
  j["chunks"] = in.chunks;
  j["query_begin"] = in.query_begin;
  j["query_end"] = in.query_end;
  j["first_document_begin"] = in.first_document_begin;
  j["exchange_rows"] = in.exchange_rows;
  j["document_ids"] = in.document_ids;
  j["cu_seqlens_q"] = in.cu_seqlens_q;
  j["cu_seqlens_k"] = in.cu_seqlens_k;
  j["max_seqlen_q"] = in.max_seqlen_q;
  j["max_seqlen_k"] = in.max_seqlen_k;
  if (in.padded()) {
    j["pad_documents_to"] = in.pad_documents_to;
    j["cu_seqlens_q_padded"] = in.cu_seqlens_q_padded;
    j["cu_seqlens_k_padded"] = in.cu_seqlens_k_padded;
    j["seqused_q"] = in.seqused_q;
    j["seqused_k"] = in.seqused_k;
    j["max_seqlen_q_padded"] = in.max_seqlen_q_padded;
    j["max_seqlen_k_padded"] = in.max_seqlen_k_padded;
  }
  j["position_index"] = in.position_index;
  j["document_index_q"] = in.document_index_q;
  j["document_index_k"] = in.document_index_k;
  j["tokens"] = in.tokens;
  j["labels"] = in.labels;
  j["loss_mask"] = in.loss_mask;
  return j;
}

}  // namespace driftless::data
