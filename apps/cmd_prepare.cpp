// `driftless prepare`: text files / JSONL / fortune files -> tokenized memmap datasets
// (train and validation splits). Wiring only; the work is data/prepare.h.
#include <iostream>

#include "apps/command.h"
#include "data/prepare.h"

namespace driftless::apps {
namespace {

Registrar reg(
    {"prepare",
     "Tokenize text files, JSONL (\"text\" field) or fortune files into .bin/.idx datasets",
     [](CLI::App& sub) {
       auto c = std::make_shared<data::PrepareConfig>();
       sub.add_option("inputs", c->inputs, "Input files or folders")->required();
       sub.add_option("-o,--output", c->output,
                      "Output folder: writes OUT/train.{bin,idx,json} and "
                      "OUT/validation.{bin,idx,json}")
           ->required();
       sub.add_option("--format", c->format, "auto, text, jsonl or fortune")->capture_default_str();
       sub.add_option("--tokenizer", c->tokenizer,
                      "gpt2, byte, or the path of a HuggingFace byte-level BPE tokenizer.json")
           ->capture_default_str();
       sub.add_option("--vocab-dir", c->vocab_dir,
                      "Folder with encoder.json and vocab.bpe (default "
                      "$DRIFTLESS_VOCAB_DIR or .cache/gpt2-vocab)");
       sub.add_option("--validation-fraction", c->validation_fraction,
                      "Fraction of documents held out for validation")
           ->capture_default_str();
       sub.add_option("--seed", c->seed, "Seed of the train/validation split")
           ->capture_default_str();
       auto quiet = std::make_shared<bool>(false);
       sub.add_flag("-q,--quiet", *quiet, "No progress bar");
       return std::function<int()>([c, quiet] {
         c->progress = !*quiet;
         data::PrepareSummary s = data::prepare(*c, std::cerr);
         data::print_summary(s, std::cout);
         return 0;
       });
     }});

}  // namespace
}  // namespace driftless::apps
