// Tensor logs (ARCHITECTURE.md "Tensor logs"): at chosen steps a run records named tensors in the
// GLOBAL layout: forward outputs of every layer, gradients flowing into them, parameter
// gradients and parameters after the update. Pieces written by micro-sequences and ranks
// are placed into (B, S, ...) tensors by their row blocks, so every layout produces the
// same names and shapes. Stored as step_N.safetensors plus step_N.json with statistics and
// the execution order (where drift is born is the first failing tensor in that order).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "layers/tap.h"

namespace driftless::train {

struct TensorStats {
  double mean = 0, std = 0, rms = 0, min = 0, max = 0;
};
TensorStats tensor_stats(const Tensor& t);

struct LoggedTensor {
  std::string name;   // e.g. "h.0.attn@forward", "h.0.attn@backward", "param_grad/wte.weight"
  std::string kind;   // forward | backward | param_grad | param
  Tensor value;       // f32 cpu
  int64_t order = 0;  // execution order of the first write
};

class TensorLogger final : public layers::TensorSink {
 public:
  TensorLogger(int64_t sequences, int64_t sequence_length, std::vector<std::string> kinds);
  void write(const std::string& name, const std::string& kind, const Tensor& value,
             const std::vector<layers::PartRows>& rows) override;
  // Whole tensors (parameter gradients, parameters): identical on every rank.
  void write_whole(const std::string& name, const std::string& kind, const Tensor& value);
  bool wants(const std::string& kind) const;
  // Combines the pieces of all ranks (sum of zero-filled tensors: rows are disjoint) with
  // `reduce`, called once per tensor in a fixed order; identity on one rank.
  void combine(const std::function<void(Tensor&)>& reduce);
  // Writes dir/step_<N>.safetensors and dir/step_<N>.json.
  void save(const std::string& dir, int64_t step) const;
  const std::vector<LoggedTensor>& tensors() const { return tensors_; }

 private:
  LoggedTensor& slot(const std::string& name, const std::string& kind, const Shape& shape);
  int64_t sequences_, sequence_length_;
  std::vector<std::string> kinds_;
  std::vector<LoggedTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// Reads a saved step back: tensors in execution order.
std::vector<LoggedTensor> load_tensor_log(const std::string& dir, int64_t step);
std::string tensor_log_path(const std::string& dir, int64_t step);  // without extension

}  // namespace driftless::train
