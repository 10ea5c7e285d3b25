// prepare(): text, JSONL and fortune inputs -> memmap splits that decode back to the input
// documents (byte tokenizer, so no vocab files are needed); seeded split; input errors.
#include "data/prepare.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "data/dataset.h"
#include "data/text_sources.h"
#include "data/tokenizer.h"
#include "engine/core/error.h"
#include "tests/test_paths.h"

namespace driftless::data {
namespace {

std::set<std::string> decoded_documents(const std::string& prefix) {
  auto ds = open_dataset(prefix);
  EXPECT_EQ(ds->vocab_size(), 257);  // from the .json sidecar
  ByteTokenizer tok;
  std::set<std::string> out;
  for (int64_t d = 0; d < ds->num_documents(); ++d) {
    auto ids = ds->document(d);
    EXPECT_EQ(ids.back(), 256);
    ids.pop_back();
    out.insert(tok.decode(ids));
  }
  return out;
}

TEST(Prepare, AllFormatsRoundTripAndSplitIsSeeded) {
  auto dir = testing::scratch_dir();
  std::ofstream(dir + "/a.fortune") << "first fortune\n%\nsecond\nfortune\n%\n%\nthird\n";
  std::ofstream(dir + "/b.jsonl") << "{\"text\": \"json one\"}\n\n{\"text\": \"json \\u00e9\"}\n";
  std::ofstream(dir + "/c.txt") << "plain text file\nwith two lines\n";
  PrepareConfig c;
  c.inputs = {dir};
  c.output = dir + "/out/ds";
  c.tokenizer = "byte";
  c.validation_fraction = 0.3;
  c.progress = false;
  std::ostringstream progress;
  PrepareSummary s = prepare(c, progress);
  ASSERT_EQ(s.splits.size(), 2u);
  EXPECT_EQ(s.files, 3);
  EXPECT_EQ(s.splits[0].documents + s.splits[1].documents, 6);
  auto train = decoded_documents(c.output + "/train");
  auto validation = decoded_documents(c.output + "/validation");
  std::set<std::string> all = train;
  all.insert(validation.begin(), validation.end());
  EXPECT_EQ(all,
            (std::set<std::string>{"first fortune\n", "second\nfortune\n", "third\n", "json one",
                                   "json \u00e9", "plain text file\nwith two lines\n"}));
  // The same seed gives the same split; the summary prints a histogram.
  PrepareSummary again = prepare(c, progress);
  EXPECT_EQ(again.splits[1].documents, s.splits[1].documents);
  EXPECT_EQ(decoded_documents(c.output + "/validation"), validation);
  std::ostringstream text;
  print_summary(s, text);
  EXPECT_NE(text.str().find("train: "), std::string::npos) << text.str();
  EXPECT_NE(text.str().find(" .. "), std::string::npos) << text.str();
}

TEST(Prepare, BadInputsNameFileAndLine) {
  auto dir = testing::scratch_dir();
  std::ofstream(dir + "/bad.jsonl") << "{\"text\": \"ok\"}\n{\"txt\": 1}\n";
  std::vector<std::string> docs;
  auto collect = [&](const std::string& d) { docs.push_back(d); };
  try {
    read_documents(dir + "/bad.jsonl", TextFormat::automatic, collect);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/broken.jsonl") << "{\"text\": \n";
  EXPECT_THROW(read_documents(dir + "/broken.jsonl", TextFormat::jsonl, collect), Error);
  EXPECT_THROW(expand_inputs({dir + "/missing"}), Error);
  EXPECT_THROW(parse_text_format("csv"), Error);
  PrepareConfig c;
  c.inputs = {dir + "/bad.jsonl"};
  c.output = dir + "/x";
  c.tokenizer = "byte";
  c.validation_fraction = 1.5;
  EXPECT_THROW(prepare(c, std::cerr), Error);
}

}  // namespace
}  // namespace driftless::data
