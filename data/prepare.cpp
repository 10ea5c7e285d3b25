// prepare() (see prepare.h).
#include "data/prepare.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "data/memmap_dataset.h"
#include "data/text_sources.h"
#include "data/tokenizer.h"
#include "engine/core/error.h"
#include "engine/core/random.h"

namespace driftless::data {

namespace {

// One line redrawn in place with '\r', at most ten times a second.
class ProgressBar {
 public:
  ProgressBar(std::ostream& out, uint64_t total, bool enabled)
      : out_(out), total_(std::max<uint64_t>(total, 1)), enabled_(enabled) {}
  void update(uint64_t done, int64_t documents, int64_t tokens, bool force = false) {
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = std::min(1.0, double(done) / double(total_));
    const int width = 30, filled = int(frac * width);
    out_ << "\rprepare [" << std::string(size_t(filled), '#')
         << std::string(size_t(width - filled), '.') << "] " << std::setw(3) << int(frac * 100)
         << "%  " << documents << " docs  " << tokens << " tokens" << std::flush;
  }
  void finish(int64_t documents, int64_t tokens) {
    update(total_, documents, tokens, true);
    if (enabled_) out_ << "\n";
  }

 private:
  std::ostream& out_;
  uint64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point last_{};
};

struct SplitWriter {
  SplitSummary summary;
  std::unique_ptr<MemmapWriter> writer;
  void add(const std::vector<int32_t>& tokens) {
    writer->add_document(tokens);
    const int64_t n = int64_t(tokens.size());
    summary.min_length = summary.documents == 0 ? n : std::min(summary.min_length, n);
    summary.max_length = std::max(summary.max_length, n);
    ++summary.documents;
    summary.tokens += n;
    size_t b = 0;
    while ((int64_t(2) << b) <= n) ++b;
    if (summary.histogram.size() <= b) summary.histogram.resize(b + 1, 0);
    ++summary.histogram[b];
  }
};

}  // namespace

PrepareSummary prepare(const PrepareConfig& c, std::ostream& progress) {
  DL_CHECK(!c.output.empty(), "prepare", "expected an output folder, got none");
  DL_CHECK(c.validation_fraction >= 0 && c.validation_fraction < 1, "prepare",
           "expected validation fraction in [0, 1), got " << c.validation_fraction);
  const TextFormat format = parse_text_format(c.format);
  auto tokenizer = make_tokenizer(c.tokenizer, c.vocab_dir);
  const auto files = expand_inputs(c.inputs);
  uint64_t total_bytes = 0;
  for (const auto& f : files) total_bytes += std::filesystem::file_size(f);
  std::filesystem::create_directories(c.output);

  std::vector<SplitWriter> splits;
  for (const char* name : {"train", "validation"}) {
    if (std::string(name) == "validation" && c.validation_fraction == 0) break;
    SplitWriter s;
    s.summary.name = name;
    s.summary.prefix = (std::filesystem::path(c.output) / name).string();
    s.writer =
        std::make_unique<MemmapWriter>(s.summary.prefix, token_type_for(tokenizer->vocab_size()));
    splits.push_back(std::move(s));
  }
  ProgressBar bar(progress, total_bytes, c.progress);
  uint64_t bytes_before = 0;
  int64_t index = 0, tokens = 0;
  for (const auto& f : files) {
    read_documents(
        f, format,
        [&](const std::string& text) {
          std::vector<int32_t> ids = tokenizer->encode(text);
          ids.push_back(tokenizer->end_of_text());
          const bool validation =
              splits.size() > 1 &&
              random::uniform01(random::derive(c.seed, 7), uint64_t(index)) < c.validation_fraction;
          splits[validation ? 1 : 0].add(ids);
          ++index;
          tokens += int64_t(ids.size());
        },
        [&](uint64_t done) { bar.update(bytes_before + done, index, tokens); });
    bytes_before += std::filesystem::file_size(f);
  }
  bar.finish(index, tokens);

  PrepareSummary summary;
  summary.tokenizer = tokenizer->name();
  summary.vocab_size = tokenizer->vocab_size();
  summary.files = int64_t(files.size());
  for (auto& s : splits) {
    s.writer->finish();
    nlohmann::json meta = {{"format", "memmap"},
                           {"tokenizer", tokenizer->name()},
                           {"vocab_size", tokenizer->vocab_size()},
                           {"end_of_text", tokenizer->end_of_text()},
                           {"split", s.summary.name},
                           {"documents", s.summary.documents},
                           {"tokens", s.summary.tokens},
                           {"seed", c.seed},
                           {"validation_fraction", c.validation_fraction},
                           {"inputs", c.inputs}};
    std::ofstream(s.summary.prefix + ".json") << meta.dump(2) << "\n";
    summary.splits.push_back(s.summary);
  }
  return summary;
}

void print_summary(const PrepareSummary& summary, std::ostream& out) {
  out << "tokenizer " << summary.tokenizer << " (vocab " << summary.vocab_size << "), "
      << summary.files << " input files\n";
  for (const auto& s : summary.splits) {
    out << s.name << ": " << s.documents << " documents, " << s.tokens << " tokens";
    if (s.documents > 0)
      out << ", length mean " << std::fixed << std::setprecision(1)
          << double(s.tokens) / double(s.documents) << " min " << s.min_length << " max "
          << s.max_length;
    out << "  -> " << s.prefix << ".{bin,idx,json}\n";
    int64_t most = 1;
    for (int64_t n : s.histogram) most = std::max(most, n);
    for (size_t b = 0; b < s.histogram.size(); ++b) {
      const int64_t lo = int64_t(1) << b, hi = (int64_t(2) << b) - 1;
      out << "  " << std::setw(6) << lo << " .. " << std::left << std::setw(6) << hi << std::right
          << std::setw(9) << s.histogram[b] << " "
          << std::string(size_t(40 * s.histogram[b] / most), '#') << "\n";
    }
  }
}

}  // namespace driftless::data
