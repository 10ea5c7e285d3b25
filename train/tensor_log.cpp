// TensorLogger: reassembly into the global layout, statistics, safetensors + JSON index.
#include "train/tensor_log.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/autograd/autograd.h"
#include "engine/core/json_limits.h"
#include "engine/core/regular_file.h"
#include "engine/core/safetensors.h"

namespace driftless::train {

TensorStats tensor_stats(const Tensor& t) {
  TensorStats s;
  auto v = t.to_vector<double>();
  if (v.empty()) return s;
  double sum = 0, sq = 0;
  s.min = v[0];
  s.max = v[0];
  for (double x : v) {
    sum += x;
    sq += x * x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  const double n = double(v.size());
  s.mean = sum / n;
  s.rms = std::sqrt(sq / n);
  s.std = std::sqrt(std::max(0.0, sq / n - s.mean * s.mean));
  return s;
}

TensorLogger::TensorLogger(int64_t sequences, int64_t sequence_length,
                           std::vector<std::string> kinds)
    : sequences_(sequences), sequence_length_(sequence_length), kinds_(std::move(kinds)) {}

bool TensorLogger::wants(const std::string& kind) const {
  return std::find(kinds_.begin(), kinds_.end(), kind) != kinds_.end();
}

LoggedTensor& TensorLogger::slot(const std::string& name, const std::string& kind,
                                 const Shape& shape) {
  const std::string key = name + "@" + kind;
  auto it = index_.find(key);
  if (it != index_.end()) {
    DL_CHECK(tensors_[it->second].value.shape() == shape, "tensor_log",
             key << " logged with shape " << shape_str(shape) << " after "
                 << shape_str(tensors_[it->second].value.shape()));
    return tensors_[it->second];
  }
  index_[key] = tensors_.size();
  tensors_.push_back({key, kind, Tensor::zeros(shape, DType::f32), int64_t(tensors_.size())});
  return tensors_.back();
}

void TensorLogger::write(const std::string& name, const std::string& kind, const Tensor& value,
                         const std::vector<layers::PartRows>& rows) {
  if (!wants(kind)) return;
  autograd::NoGradGuard no_grad;
  Shape global{sequences_, sequence_length_};
  for (int64_t d = 1; d < value.dim(); ++d) global.push_back(value.size(d));
  LoggedTensor& t = slot(name, kind, global);
  Tensor v = value.to(Device::cpu, DType::f32);
  int64_t row = 0;
  for (const auto& b : rows) {
    DL_CHECK(b.sequence < sequences_ && b.begin + b.rows <= sequence_length_, "tensor_log",
             name << ": rows of sequence " << b.sequence << " [" << b.begin << ", "
                  << b.begin + b.rows << ") outside the global (" << sequences_ << ", "
                  << sequence_length_ << ")");
    t.value.select(0, b.sequence).narrow(0, b.begin, b.rows).copy_(v.narrow(0, row, b.rows));
    row += b.rows;
  }
}

void TensorLogger::write_whole(const std::string& name, const std::string& kind,
                               const Tensor& value) {
  if (!wants(kind)) return;
  LoggedTensor& t = slot(name, kind, value.shape());
  t.value.copy_(value.to(Device::cpu, DType::f32));
}

void TensorLogger::combine(const std::function<void(Tensor&)>& reduce) {
  for (auto& t : tensors_)
    if (t.kind == "forward" || t.kind == "backward") reduce(t.value);
}

std::string tensor_log_path(const std::string& dir, int64_t step) {
  std::ostringstream os;
  os << dir << "/step_" << std::setw(6) << std::setfill('0') << step;
  return os.str();
}

void TensorLogger::save(const std::string& dir, int64_t step) const {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> named;
  nlohmann::json index = nlohmann::json::array();
  for (const auto& t : tensors_) {
    named.push_back({t.name, t.value});
    TensorStats s = tensor_stats(t.value);
    index.push_back({{"name", t.name},   {"kind", t.kind}, {"order", t.order},
                     {"shape", t.value.shape()}, {"mean", s.mean}, {"std", s.std},
                     {"rms", s.rms},     {"min", s.min},   {"max", s.max}});
  }
  const std::string base = tensor_log_path(dir, step);
  write_safetensors(base + ".safetensors", named, {{"step", std::to_string(step)}});
  std::ofstream(base + ".json") << nlohmann::json{{"step", step}, {"tensors", index}}.dump(1)
                                << "\n";
}

std::vector<LoggedTensor> load_tensor_log(const std::string& dir, int64_t step) {
  const std::string base = tensor_log_path(dir, step);
  DL_CHECK(std::filesystem::exists(base + ".json"), "tensor_log",
           "no tensor log " << base << ".json");
  const std::string text = read_regular_file(base + ".json", "tensor_log");
  DL_CHECK(!json_too_deep(text), "tensor_log", base << ".json: nested too deep");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    DL_FAIL("tensor_log", base << ".json: " << e.what());
  }
  SafetensorsFile file = read_safetensors(base + ".safetensors");
  std::vector<LoggedTensor> out;
  for (const auto& e : index.at("tensors")) {
    LoggedTensor t;
    t.name = e.at("name").get<std::string>();
    t.kind = e.at("kind").get<std::string>();
    t.order = e.at("order").get<int64_t>();
    t.value = file.get(t.name);
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(),
            [](const LoggedTensor& a, const LoggedTensor& b) { return a.order < b.order; });
  return out;
}

}  // namespace driftless::train
