// `driftless prepare`: text -> tokenized memmap datasets, split into train / validation by
// document (seeded), with a progress bar and a summary. The CLI (apps/cmd_prepare.cpp)
// only wires flags to PrepareConfig.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace driftless::data {

struct PrepareConfig {
  std::vector<std::string> inputs;  // files or folders
  std::string format = "auto";      // auto, text, jsonl, fortune
  std::string output;  // folder: writes OUTPUT/train.{bin,idx,json}, OUTPUT/validation.{...}
  std::string tokenizer = "gpt2";     // gpt2 or byte
  std::string vocab_dir;              // for gpt2; empty = default_vocab_dir()
  double validation_fraction = 0.05;  // of documents; 0 writes no validation split
  uint64_t seed = 1234;
  bool progress = true;  // progress bar on the given stream
};

struct SplitSummary {
  std::string name;    // train or validation
  std::string prefix;  // path prefix of the .bin/.idx/.json written
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t min_length = 0, max_length = 0;
  std::vector<int64_t> histogram;  // bucket b: lengths in [2^b, 2^(b+1))
};

struct PrepareSummary {
  std::string tokenizer;
  int32_t vocab_size = 0;
  int64_t files = 0;
  std::vector<SplitSummary> splits;
};

// Every document gets end-of-text appended. A document goes to validation when
// uniform01(seed, its index in input order) < validation_fraction.
PrepareSummary prepare(const PrepareConfig& config, std::ostream& progress);

// Human-readable summary: per split documents, tokens, mean/min/max and a length histogram.
void print_summary(const PrepareSummary& summary, std::ostream& out);

}  // namespace driftless::data
