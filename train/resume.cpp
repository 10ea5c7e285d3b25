// Choosing and checking the checkpoint --resume continues from (resume.h).
#include "train/resume.h"

#include <algorithm>
#include <ostream>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "train/checkpoint.h"

namespace driftless::train {

std::string newest_intact_checkpoint(const std::string& run_dir, std::ostream& log) {
  const auto all = list_checkpoints(run_dir);
  DL_CHECK(!all.empty(), "train", "--resume: no checkpoint in " << run_dir << "/checkpoints");
  for (size_t i = 0; i < all.size(); ++i) {
    try {
      verify_checkpoint(all[i].second);
      // The name says which step the file holds; metadata saying another was edited.
      const int64_t step = read_checkpoint_info(all[i].second).step;
      DL_CHECK(step == all[i].first, "checkpoint",
               all[i].second << ": its metadata says step " << step << ", its name step "
                             << all[i].first << "; the file was edited or renamed");
    } catch (const Error& e) {
      log << "--resume: skipping a damaged checkpoint: " << e.what() << "\n";
      continue;
    }
    if (i > 0)
      log << "--resume: falling back to the newest intact checkpoint, " << all[i].second
          << " (step " << all[i].first << "), past " << i << " damaged newer one"
          << (i > 1 ? "s" : "") << "\n";
    return all[i].second;
  }
  DL_FAIL("train", "--resume: none of the " << all.size() << " checkpoints in " << run_dir
                                            << "/checkpoints is intact (reasons above)");
}

bool changes_no_numbers(const std::string& key, const Config& stored, const Config& now) {
  static const std::set<std::string> kFree = {"attention.kernel_cache.capacity",
                                              "attention.kernel_cache.dir",
                                              "training.eval_interval",
                                              "training.eval_batches",
                                              "training.checkpoint_interval",
                                              "training.keep_checkpoints",
                                              "training.max_nonfinite_steps",
                                              "training.log_interval",
                                              "training.init_from",
                                              "data.validation_path",
                                              "data.tokenizer",
                                              "distributed.timeout_seconds",
                                              "distributed.bucket_mb",
                                              "precision.peak_tflops",
                                              "run.output_dir",
                                              "run.tensor_logs.steps",
                                              "run.tensor_logs.kinds"};
  if (kFree.count(key)) return true;
  return key == "training.steps" && stored.optimizer.decay == optim::LrDecay::constant &&
         now.optimizer.decay == optim::LrDecay::constant;
}

void check_resume_config(const std::string& checkpoint, const Config& stored, const Config& now,
                         const std::vector<std::string>& allowed, std::ostream& log) {
  const auto before = config_entries(stored), after = config_entries(now);
  for (const std::string& key : allowed)
    DL_CHECK(
        std::any_of(before.begin(), before.end(), [&](const auto& e) { return e.first == key; }),
        "train", "--allow-change " << key << ": not a config key");
  std::ostringstream refused, flags, noted;
  for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
    const auto& [key, was] = before[i];
    const std::string& is = after[i].second;
    if (was == is || changes_no_numbers(key, stored, now)) continue;
    const std::string change = key + " " + was + " -> " + is;
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) {
      noted << (noted.tellp() > 0 ? ", " : "") << change;
      continue;
    }
    refused << (refused.tellp() > 0 ? ", " : "") << change;
    flags << " --allow-change " << key;
  }
  DL_CHECK(refused.tellp() == 0, "train",
           "--resume: " << checkpoint << " was trained with another config (" << refused.str()
                        << "); the run would not continue bit for bit. Resume anyway with"
                        << flags.str());
  if (noted.tellp() > 0)
    log << "--resume: allowed config changes (no longer bit for bit): " << noted.str() << "\n";
}

}  // namespace driftless::train
