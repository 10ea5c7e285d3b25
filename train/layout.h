// The batch layout of a run: dp × depth-first × breadth-first × micro-sequences(m) × sdp
// (ARCHITECTURE.md "Data flow"). Rank R of dp·sdp ranks is sdp rank R % sdp of batch-data rank
// R / sdp; batch-data rank d takes a contiguous block of B / dp sequences of the global
// batch, cut into depth_first groups of breadth_first micro-batches.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/routes/fault_route.h"
#include "layers/attention/routes/route.h"
#include "train/config.h"

namespace driftless::train {

using layers::ContextParallel;

struct Layout {
  int64_t data_parallel = 1, sequence_data_parallel = 1;
  // Context parallelism: context_parallel ranks share each sequence (sdp is then 1).
  int64_t context_parallel = 1;
  ContextParallel cp_kind = ContextParallel::none;
  int64_t cp_group_size = 1;  // hybrid: ranks per all-to-all group (the ring spans the groups)
  int64_t breadth_first = 1, depth_first = 1, micro_sequences = 1;
  int64_t rank = 0;  // world rank
  // Ranks sharing one sequence (SDP or context parallel): process_group.h's sdp group.
  int64_t sequence_ranks() const { return sequence_data_parallel * context_parallel; }
  // Rank coordinates as parallel/process_group.h numbers ranks; sdp_rank() is the position
  // within the ranks sharing a sequence.
  int64_t sdp_rank() const;
  int64_t data_rank() const;
  int64_t world_size() const { return data_parallel * sequence_ranks(); }
  static Layout from_config(const Config& c, int64_t rank);
  std::string describe() const;
};

// The ModelInputs of one sequence's micro-sequence i (of m) on the rank at `position` among
// the P ranks sharing the sequence (ARCHITECTURE.md "Who holds which tokens", context_parallel.h):
// SDP and a2a hold one contiguous chunk of P, the ring chunks position and 2P-1-position of
// 2P, the hybrid (groups of G) pieces position % G of its group's two ring chunks
// (hybrid_chunks: chunks of 2P).
std::vector<data::ModelInput> rank_inputs(const data::PackedSequence& sequence, int32_t i,
                                          int32_t m, int32_t position, int32_t P,
                                          ContextParallel kind, int32_t pad_documents_to,
                                          int32_t G = 1);
// What the route attends for each of rank_inputs' entries (PartInput::whole): a2a the whole
// micro-sequence (SequencePart {i, m, 0, 1}), the hybrid the group's ring chunk of 2P / G;
// empty for the other kinds.
std::vector<data::ModelInput> attended_inputs(const data::PackedSequence& sequence, int32_t i,
                                              int32_t m, int32_t position, int32_t P,
                                              ContextParallel kind, int32_t pad_documents_to,
                                              int32_t G = 1);

// The attention route of the layout (layers/attention/routes/): one micro-sequence on one
// rank reads K/V straight from QKV (local); SDP and micro-sequences go through the K/V
// buffers over `exchange` (the ranks sharing a sequence; full_kv_exchange: whole chunks);
// context parallelism takes the ring, the all-to-all or the hybrid (over cp_group, the G ranks
// of this rank's all-to-all group, and cp_ring, the ranks at its place in the other groups).
// keep_buffers: the buffer route even where the layout needs no K/V buffer (a route wrapped
// by train::StepHooks, which may reach into the buffers' K/V path).
std::unique_ptr<layers::AttentionRoute> attention_route(const Layout& layout, KvExchange* exchange,
                                                        bool full_kv_exchange,
                                                        KvExchange* cp_group = nullptr,
                                                        KvExchange* cp_ring = nullptr,
                                                        bool keep_buffers = false);

// groups[g][mb] = global sequence indices of micro-batch mb of depth-first group g on this
// rank. Throws when the batch does not divide.
std::vector<std::vector<std::vector<int64_t>>> micro_batches(const Layout& layout,
                                                             int64_t sequences);

}  // namespace driftless::train
