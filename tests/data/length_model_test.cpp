// Exhaustive property test of the length model (ARCHITECTURE.md "Who holds which tokens",
// "Canonical varlen layout"): the dense mask rebuilt from every ModelInput equals the mask
// from document ids of the whole sequence, restricted to the rank's queries and to keys from
// first_document_begin; cu_seqlens canonical; positions restart at every document start.
#include "data/length_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/core/random.h"

namespace driftless::data {
namespace {

// Every composition of S <= kExhaustive; for longer S (up to 24) a seeded sample.
constexpr int kExhaustive = 16;
constexpr int kMaxLength = 24;
constexpr int kSamplesPerLength = 4000;

struct Reference {
  std::vector<int32_t> doc;    // [S] document index of each position
  std::vector<bool> real;      // [S] false on padding
  std::vector<int64_t> start;  // [num_docs] start of each document
};

Reference reference(const std::vector<int32_t>& lengths, int32_t pad) {
  Reference r;
  int64_t s = 0;
  for (size_t j = 0; j < lengths.size(); ++j) {
    r.start.push_back(s);
    int64_t e = document_extent(lengths[j], pad);
    for (int64_t p = 0; p < e; ++p) {
      r.doc.push_back(int32_t(j));
      r.real.push_back(p < lengths[j]);
    }
    s += e;
  }
  return r;
}

// Row -> listed document n of a memory run, or -1 on a padding row beyond seqused.
std::vector<int32_t> run_of_rows(const std::vector<int32_t>& cu, const std::vector<int32_t>& used,
                                 int64_t rows) {
  std::vector<int32_t> run(rows, -1);
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    for (int32_t t = cu[n]; t < cu[n] + used[n]; ++t) run[t] = int32_t(n);
  return run;
}

std::string describe(const std::vector<int32_t>& lengths, int32_t pad, int m, int i, int P, int r) {
  return ::testing::PrintToString(lengths) + " pad " + std::to_string(pad) + " m " +
         std::to_string(m) + " i " + std::to_string(i) + " P " + std::to_string(P) + " r " +
         std::to_string(r);
}

// Returns the number of slices checked; stops at the first failure with a readable message.
int64_t check_all_slices(const std::vector<int32_t>& lengths, int32_t pad) {
  Reference ref = reference(lengths, pad);
  const int64_t S = int64_t(ref.doc.size());
  int64_t checked = 0;
  for (int m = 1; m <= 4; ++m) {
    if (S % m) continue;
    for (int P : {1, 2, 4}) {
      if ((S / m) % P) continue;
      for (int i = 0; i < m; ++i) {
        for (int r = 0; r < P; ++r) {
          ModelInput in = length_model(lengths, {i, m, r, P}, pad);
          ++checked;
          auto fail = [&](const std::string& what) {
            ADD_FAILURE() << describe(lengths, pad, m, i, P, r) << ": " << what;
            return checked;
          };
          check_canonical(in);
          const int64_t L = S / m, q0 = i * L + r * (L / P), q1 = q0 + L / P;
          if (in.query_begin != q0 || in.query_end != q1) return fail("query range");
          // First document with a query: the one holding position q0.
          if (in.first_document_begin != ref.start[ref.doc[q0]])
            return fail("first_document_begin " + std::to_string(in.first_document_begin));
          const int64_t fdb = in.first_document_begin;
          auto qrun = run_of_rows(in.cu_seqlens_q_padded, in.seqused_q, q1 - q0);
          auto krun = run_of_rows(in.cu_seqlens_k_padded, in.seqused_k, q1 - fdb);
          for (int64_t t = 0; t < q1 - q0; ++t) {
            const int64_t p = q0 + t;
            if (in.document_index_q[t] != ref.doc[p]) return fail("document_index_q");
            if (in.position_index[t] != p - ref.start[ref.doc[p]]) return fail("position_index");
            for (int64_t u = 0; u < fdb; ++u)  // keys before the extent are never needed
              if (ref.real[p] && ref.real[u] && ref.doc[p] == ref.doc[u]) return fail("fdb");
            for (int64_t uk = fdb; uk < q1; ++uk) {
              const int64_t u = uk - fdb;
              bool want = ref.real[p] && ref.real[uk] && ref.doc[p] == ref.doc[uk] && uk <= p;
              const int32_t n = qrun[t];
              bool got = false;
              if (n >= 0 && krun[u] == n) {
                int64_t a = t - in.cu_seqlens_q_padded[n], b = u - in.cu_seqlens_k_padded[n];
                got = b <= a + in.seqused_k[n] - in.seqused_q[n];
              }
              if (want != got)
                return fail("mask(q " + std::to_string(p) + ", k " + std::to_string(uk) +
                            ") want " + std::to_string(want));
            }
          }
          for (int64_t u = 0; u < q1 - fdb; ++u)
            if (in.document_index_k[u] != ref.doc[fdb + u]) return fail("document_index_k");
          // Each memory run holds exactly the rows of its document.
          for (size_t n = 0; n < in.document_ids.size(); ++n) {
            for (int32_t t = in.cu_seqlens_q_padded[n]; t < in.cu_seqlens_q_padded[n + 1]; ++t)
              if (ref.doc[q0 + t] != in.document_ids[n]) return fail("q run");
            for (int32_t u = in.cu_seqlens_k_padded[n]; u < in.cu_seqlens_k_padded[n + 1]; ++u)
              if (ref.doc[fdb + u] != in.document_ids[n]) return fail("k run");
          }
          if (!pad && (in.cu_seqlens_q != in.cu_seqlens_q_padded ||
                       in.cu_seqlens_k != in.cu_seqlens_k_padded))
            return fail("padded variants differ without padding");
        }
      }
    }
  }
  return checked;
}

std::vector<int32_t> composition(int S, uint64_t cuts) {  // bit k set: a cut after k+1
  std::vector<int32_t> lengths;
  int32_t run = 1;
  for (int k = 0; k < S - 1; ++k) {
    if (cuts >> k & 1) {
      lengths.push_back(run);
      run = 0;
    }
    ++run;
  }
  lengths.push_back(run);
  return lengths;
}

TEST(LengthModel, EveryCompositionMatchesDenseMask) {
  int64_t checked = 0;
  for (int S = 1; S <= kMaxLength; ++S) {
    const uint64_t count = uint64_t(1) << (S - 1);
    const bool exhaustive = S <= kExhaustive;
    const uint64_t n = exhaustive ? count : kSamplesPerLength;
    for (uint64_t c = 0; c < n; ++c) {
      uint64_t cuts = exhaustive ? c : random::hash(S, c) & (count - 1);
      checked += check_all_slices(composition(S, cuts), 0);
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(checked, 1000000);
}

TEST(LengthModel, ZeroLengthDocumentsAnywhere) {
  // A zero-length document is never listed; insert one (or two) at every gap.
  for (int S = 1; S <= 10; ++S) {
    for (uint64_t c = 0; c < (uint64_t(1) << (S - 1)); ++c) {
      std::vector<int32_t> base = composition(S, c);
      for (size_t g = 0; g <= base.size(); ++g) {
        std::vector<int32_t> lengths = base;
        lengths.insert(lengths.begin() + g, 0);
        check_all_slices(lengths, 0);
        lengths.insert(lengths.begin() + g, 0);
        check_all_slices(lengths, 0);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(LengthModel, PaddedDocumentsEveryRealLength) {
  // Extents are multiples of N; each document's real length is any of ext-N+1 .. ext.
  for (int N : {2, 3, 4}) {
    for (int S = N; S <= 16; S += N) {
      const int blocks = S / N;
      for (uint64_t c = 0; c < (uint64_t(1) << (blocks - 1)); ++c) {
        std::vector<int32_t> ext = composition(blocks, c);
        uint64_t variants = 1;
        for (size_t j = 0; j < ext.size(); ++j) variants *= N;
        for (uint64_t v = 0; v < variants; ++v) {
          std::vector<int32_t> lengths = ext;
          uint64_t x = v;
          for (auto& l : lengths) {
            l = l * N - int32_t(x % N);
            x /= N;
          }
          check_all_slices(lengths, N);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// ModelInput::exchange_rows against the reads it must serve: every key row that some rank
// reads (in any micro-sequence) from a chunk another rank wrote lies within the last
// exchange_rows rows of that chunk, and exchange_rows is no larger than those reads need.
// The same value on every rank of a micro-sequence.
void check_exchange_rows(const std::vector<int32_t>& lengths, int32_t pad) {
  const int64_t S = int64_t(reference(lengths, pad).doc.size());
  for (int m = 1; m <= 4; ++m) {
    if (S % m) continue;
    for (int P : {2, 3, 4}) {
      const int64_t L = S / m;
      if (L % P) continue;
      const int64_t c = L / P;
      std::vector<int64_t> exch(static_cast<size_t>(m), 0), need(static_cast<size_t>(m), 0);
      for (int i = 0; i < m; ++i) {
        exch[size_t(i)] = length_model(lengths, {i, m, 0, P}, pad).exchange_rows;
        for (int r = 1; r < P; ++r)
          ASSERT_EQ(length_model(lengths, {i, m, r, P}, pad).exchange_rows, exch[size_t(i)])
              << describe(lengths, pad, m, i, P, r);
      }
      for (int j = 0; j < m; ++j)
        for (int r = 0; r < P; ++r) {
          ModelInput in = length_model(lengths, {j, m, r, P}, pad);
          for (int64_t u = in.first_document_begin; u < in.query_end; ++u) {
            const int64_t i = u / L, k = (u - i * L) / c, chunk_end = i * L + (k + 1) * c;
            if (k == r) continue;  // written by this rank itself
            need[size_t(i)] = std::max(need[size_t(i)], chunk_end - u);
          }
        }
      for (int i = 0; i < m; ++i)
        ASSERT_EQ(exch[size_t(i)], need[size_t(i)])
            << describe(lengths, pad, m, i, P, 0) << ": exchange_rows vs the reads";
    }
  }
}

TEST(LengthModel, ExchangeRowsCoverEveryCrossRankRead) {
  for (int S = 1; S <= 12; ++S)
    for (uint64_t c = 0; c < (uint64_t(1) << (S - 1)); ++c) {
      check_exchange_rows(composition(S, c), 0);
      if (HasFailure()) return;
    }
  // Padding: extents of 2, real lengths 1 or 2; and zero-length documents.
  for (int blocks = 1; blocks <= 6; ++blocks)
    for (uint64_t c = 0; c < (uint64_t(1) << (blocks - 1)); ++c) {
      std::vector<int32_t> lengths = composition(blocks, c);
      for (auto& l : lengths) l = 2 * l - (l % 2);
      check_exchange_rows(lengths, 2);
      lengths.insert(lengths.begin() + lengths.size() / 2, 0);
      check_exchange_rows(lengths, 0);
      if (HasFailure()) return;
    }
  // Known values: one 32-token document over 2 ranks needs whole chunks; documents that
  // end on the chunk boundary need nothing; a document straddling it from row 1, 15 rows.
  EXPECT_EQ(length_model(std::vector<int32_t>{32}, {0, 1, 0, 2}).exchange_rows, 16);
  EXPECT_EQ(length_model(std::vector<int32_t>{5, 0, 11, 3, 13}, {0, 1, 1, 2}).exchange_rows, 0);
  EXPECT_EQ(length_model(std::vector<int32_t>{1, 30, 1}, {0, 1, 0, 2}).exchange_rows, 15);
}

TEST(LengthModel, KnownCase) {
  // Documents 5, 3, 8 (S = 16), m = 2, P = 2: micro-sequence 1 rank 0 holds queries [8, 12).
  std::vector<int32_t> lengths = {5, 3, 8};
  ModelInput in = length_model(lengths, {1, 2, 0, 2});
  EXPECT_EQ(in.query_begin, 8);
  EXPECT_EQ(in.query_end, 12);
  EXPECT_EQ(in.first_document_begin, 8);
  EXPECT_EQ(in.cu_seqlens_q, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(in.cu_seqlens_k, (std::vector<int32_t>{0, 4}));
  in = length_model(lengths, {0, 2, 1, 2});  // queries [4, 8): end of doc 0, all of doc 1
  EXPECT_EQ(in.first_document_begin, 0);
  EXPECT_EQ(in.cu_seqlens_q, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(in.cu_seqlens_k, (std::vector<int32_t>{0, 5, 8}));
  EXPECT_EQ(in.position_index, (std::vector<int32_t>{4, 0, 1, 2}));
  EXPECT_EQ(in.max_seqlen_q, 3);
  EXPECT_EQ(in.max_seqlen_k, 5);
  in = length_model(lengths, {1, 2, 1, 2});  // queries [12, 16): doc 2 began at 8
  EXPECT_EQ(in.first_document_begin, 8);
  EXPECT_EQ(in.position_index, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(in.cu_seqlens_k, (std::vector<int32_t>{0, 8}));
}

TEST(LengthModel, RejectsBadLayouts) {
  std::vector<int32_t> lengths = {5, 2};
  EXPECT_THROW(length_model(lengths, {0, 2, 0, 1}), Error);  // 2 does not divide 7
  EXPECT_THROW(length_model(lengths, {0, 1, 0, 2}), Error);
  EXPECT_THROW(length_model(lengths, {1, 1, 0, 1}), Error);
  std::vector<int32_t> negative = {3, -1};
  EXPECT_THROW(length_model(negative, {0, 1, 0, 1}), Error);
  std::vector<int32_t> empty = {0, 0};
  EXPECT_THROW(length_model(empty, {0, 1, 0, 1}), Error);
  try {
    length_model(lengths, {0, 2, 0, 1});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[length_model]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace driftless::data
