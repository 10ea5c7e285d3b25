// Layout arithmetic (layout.h).
#include "train/layout.h"

#include <algorithm>
#include <sstream>

#include "engine/core/error.h"
#include "layers/attention/routes/all_to_all_route.h"
#include "layers/attention/routes/buffer_route.h"
#include "layers/attention/routes/hybrid_route.h"
#include "layers/attention/routes/local_route.h"
#include "layers/attention/routes/ring_route.h"
#include "parallel/process_group.h"

namespace driftless::train {

Layout Layout::from_config(const Config& c, int64_t rank) {
  Layout l;
  l.data_parallel = c.distributed.data_parallel;
  l.sequence_data_parallel = c.distributed.sequence_data_parallel;
  const ContextParallelConfig& cp = c.distributed.context_parallel;
  l.cp_kind = cp.size > 1 ? cp.kind : ContextParallel::none;
  if (l.cp_kind != ContextParallel::none) l.context_parallel = cp.size;
  if (l.cp_kind == ContextParallel::hybrid) l.cp_group_size = cp.group_size;
  l.breadth_first = c.schedule.breadth_first;
  l.depth_first = c.schedule.depth_first;
  l.micro_sequences = c.schedule.micro_sequences;
  l.rank = rank;
  return l;
}

namespace {
parallel::RankCoords coords(const Layout& l) {
  return parallel::rank_coords(int(l.rank), {int(l.data_parallel), int(l.sequence_ranks())});
}
}  // namespace

int64_t Layout::sdp_rank() const {
  return coords(*this).sdp_rank;
}
int64_t Layout::data_rank() const {
  return coords(*this).batch_rank;
}

std::string Layout::describe() const {
  std::ostringstream os;
  os << "dp " << data_parallel << " x sdp " << sequence_data_parallel;
  if (context_parallel > 1)
    os << " x cp " << context_parallel
       << (cp_kind == ContextParallel::a2a ? " (a2a)"
           : cp_kind == ContextParallel::ring
               ? " (ring)"
               : " (hybrid, groups of " + std::to_string(cp_group_size) + ")");
  os << ", depth-first " << depth_first << " x breadth-first " << breadth_first
     << ", micro-sequences " << micro_sequences;
  return os.str();
}

std::vector<data::ModelInput> rank_inputs(const data::PackedSequence& sequence, int32_t i,
                                          int32_t m, int32_t position, int32_t P,
                                          ContextParallel kind, int32_t pad_documents_to,
                                          int32_t G) {
  std::vector<data::ModelInput> out;
  if (kind == ContextParallel::ring || kind == ContextParallel::hybrid) {
    const int64_t L = int64_t(sequence.tokens.size()) / std::max(m, 1);
    DL_CHECK(L % (2 * P) == 0, "layout",
             "ring context parallelism cuts a micro-sequence of " << L << " tokens into 2 x " << P
                                                                  << " chunks: it does not divide");
    DL_CHECK(pad_documents_to <= 1, "layout",
             "ring context parallelism takes no padding between documents (pad_documents_to "
                 << pad_documents_to << ")");
    const auto chunks = kind == ContextParallel::ring ? layers::ring_chunks(position, P)
                                                      : layers::hybrid_chunks(position, P, G);
    for (int64_t chunk : chunks)
      out.push_back(
          data::make_model_input(sequence, {i, m, int32_t(chunk), 2 * P}, pad_documents_to));
  } else {
    out.push_back(data::make_model_input(sequence, {i, m, position, P}, pad_documents_to));
  }
  return out;
}

std::vector<data::ModelInput> attended_inputs(const data::PackedSequence& sequence, int32_t i,
                                              int32_t m, int32_t position, int32_t P,
                                              ContextParallel kind, int32_t pad_documents_to,
                                              int32_t G) {
  std::vector<data::ModelInput> out;
  if (kind == ContextParallel::a2a) {
    out.push_back(data::make_model_input(sequence, {i, m, 0, 1}, pad_documents_to));
  } else if (kind == ContextParallel::hybrid) {
    const int32_t groups = P / G;
    for (int64_t chunk : layers::ring_chunks(position / G, groups))
      out.push_back(
          data::make_model_input(sequence, {i, m, int32_t(chunk), 2 * groups}, pad_documents_to));
  }
  return out;
}

std::unique_ptr<layers::AttentionRoute> attention_route(const Layout& l, KvExchange* exchange,
                                                        bool full_kv_exchange, KvExchange* cp_group,
                                                        KvExchange* cp_ring, bool keep_buffers) {
  switch (l.cp_kind) {
    case ContextParallel::hybrid:
      DL_CHECK((cp_group && cp_ring) || l.context_parallel == 1, "layout",
               "hybrid context parallelism needs the group and ring exchanges");
      return std::make_unique<layers::HybridRoute>(cp_group, cp_ring);
    case ContextParallel::ring:
      return std::make_unique<layers::RingRoute>(exchange);
    case ContextParallel::a2a:
      return std::make_unique<layers::AllToAllRoute>(exchange);
    case ContextParallel::none:
      break;
  }
  // Whole sequences whose K/V nobody else reads: no buffer (bf16 K/V and f32 gradients
  // would be 1.8 GB for GPT-2 124M at 16 x 1024), the same bits.
  if (!keep_buffers && l.micro_sequences == 1 && l.sequence_ranks() == 1)
    return std::make_unique<layers::LocalRoute>();
  return std::make_unique<layers::BufferRoute>(exchange, full_kv_exchange);
}

std::vector<std::vector<std::vector<int64_t>>> micro_batches(const Layout& l, int64_t B) {
  const int64_t split = l.data_parallel * l.depth_first * l.breadth_first;
  DL_CHECK(B % split == 0, "layout",
           "batch.sequences (" << B << ") must be divisible by data_parallel x depth_first x "
                               << "breadth_first (" << split << ")");
  const int64_t per_rank = B / l.data_parallel,
                per_mb = per_rank / (l.depth_first * l.breadth_first);
  std::vector<std::vector<std::vector<int64_t>>> groups(size_t(l.depth_first));
  int64_t next = l.data_rank() * per_rank;
  for (auto& g : groups) {
    g.resize(size_t(l.breadth_first));
    for (auto& mb : g)
      for (int64_t j = 0; j < per_mb; ++j) mb.push_back(next++);
  }
  return groups;
}

}  // namespace driftless::train
