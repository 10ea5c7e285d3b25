// Collective agreement between the ranks of a job (rank_agreement.h).
#include "train/rank_agreement.h"

#include <algorithm>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/random.h"

namespace driftless::train {

namespace {

// Each rank's values (n per rank), gathered as f64 (exact for |v| < 2^53).
std::vector<double> gather(parallel::Communicator& comm, const std::vector<double>& mine) {
  const int64_t n = int64_t(mine.size()), P = comm.size();
  if (P == 1) return mine;
  Tensor in = Tensor::from_vector(mine).to(comm.device());
  Tensor out = Tensor::zeros({P * n}, DType::f64, comm.device());
  comm.all_gather_into(out, in);
  return out.to(Device::cpu).to_vector<double>();
}

uint64_t hash_entries(const Entries& entries) {
  uint64_t h = 0x6a09e667f3bcc908ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = random::splitmix64(h ^ c);
    h = random::splitmix64(h ^ 0xffu);  // separator: ("ab","c") != ("a","bc")
  };
  for (const auto& [k, v] : entries) mix(k), mix(v);
  return h;
}

Entries parse_entries(const std::string& text) {
  Entries out;
  std::istringstream in(text);
  for (std::string key, value; std::getline(in, key, '\0') && std::getline(in, value, '\0');)
    out.emplace_back(key, value);
  return out;
}

}  // namespace

std::vector<std::string> all_gather_text(parallel::Communicator& comm, const std::string& text) {
  const std::vector<double> lengths = gather(comm, {double(text.size())});
  const size_t longest = size_t(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<double> mine(longest, 0.0);
  for (size_t i = 0; i < text.size(); ++i) mine[i] = double(static_cast<unsigned char>(text[i]));
  const std::vector<double> all = gather(comm, mine);
  std::vector<std::string> out(lengths.size());
  for (size_t r = 0; r < out.size(); ++r)
    for (size_t i = 0; i < size_t(lengths[r]); ++i)
      out[r] += char(static_cast<unsigned char>(all[r * longest + i]));
  return out;
}

void check_ranks_agree(parallel::Communicator& comm, const Entries& entries,
                       const std::string& what) {
  if (comm.size() == 1) return;
  const uint64_t h = hash_entries(entries);
  // Two 32-bit halves: exact in f64.
  const std::vector<double> hashes = gather(comm, {double(h >> 32), double(h & 0xffffffffu)});
  bool same = true;
  for (size_t r = 1; r < hashes.size() / 2; ++r)
    same = same && hashes[2 * r] == hashes[0] && hashes[2 * r + 1] == hashes[1];
  if (same) return;
  std::string text;
  for (const auto& [k, v] : entries) text += k + '\0' + v + '\0';
  const std::vector<std::string> all = all_gather_text(comm, text);
  const Entries root = parse_entries(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    const Entries other = parse_entries(all[r]);
    for (size_t i = 0; i < std::max(root.size(), other.size()); ++i) {
      if (i < root.size() && i < other.size() && root[i] == other[i]) continue;
      if (i < root.size() && i < other.size() && root[i].first == other[i].first)
        DL_FAIL("train", "ranks disagree on the " << what << ": " << root[i].first << " is "
                                                  << root[i].second << " on rank 0 but "
                                                  << other[i].second << " on rank " << r
                                                  << "; every rank must run the same " << what);
      auto key = [](const Entries& e, size_t j) { return j < e.size() ? e[j].first : "(none)"; };
      DL_FAIL("train", "ranks disagree on the " << what << ": entry " << i << " is " << key(root, i)
                                                << " on rank 0 but " << key(other, i) << " on rank "
                                                << r << " (different driftless builds?)");
    }
  }
  DL_FAIL("train", "ranks disagree on the " << what << " (hashes differ, entries equal)");
}

int64_t all_ranks_max(parallel::Communicator& comm, int64_t value) {
  const std::vector<double> all = gather(comm, {double(value)});
  return int64_t(*std::max_element(all.begin(), all.end()));
}

}  // namespace driftless::train
