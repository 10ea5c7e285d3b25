// Length model (preprocessor): from the document lengths of one sequence and the slice a
// (micro-sequence, sdp rank) owns, the varlen metadata of its ModelInput. A pure function
// of its arguments; implements ARCHITECTURE.md "Who holds which tokens" / "Canonical varlen
// layout".
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "data/model_input.h"

namespace driftless::data {

struct SequencePart {
  int32_t micro_sequence = 0;   // i in [0, m)
  int32_t micro_sequences = 1;  // m, divides S
  int32_t chunk = 0;            // c in [0, n): SDP rank r of P, or a ring chunk of 2P
  int32_t chunks = 1;           // n, divides S / m
};

// Extent of a document in the packed sequence: length rounded up to a multiple of
// pad_documents_to (0 or 1 = no padding).
int64_t document_extent(int64_t length, int32_t pad_documents_to);

// document_lengths: real tokens of each document of the sequence, in order (zeros allowed).
// The sequence length S is the sum of their extents. Fills every field of ModelInput
// except tokens, labels and loss_mask (see make_model_input in data/sampler.h), which are
// left empty. Throws driftless::Error when m does not divide S, P does not divide S/m, or
// an index is out of range.
ModelInput length_model(std::span<const int32_t> document_lengths, const SequencePart& slice,
                        int32_t pad_documents_to = 0);

// Checks the canonical contract of ARCHITECTURE.md on a ModelInput (prefix sums start at 0,
// non-decreasing, end at T_q / T_k, seqused within the padded runs, array sizes agree).
// Throws driftless::Error naming the offending field and index.
void check_canonical(const ModelInput& in);

}  // namespace driftless::data
