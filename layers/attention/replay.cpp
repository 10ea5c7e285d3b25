// Reading, writing and replaying one attention call (replay.h).
#include "layers/attention/replay.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include "engine/core/safetensors.h"
#include "layers/attention/attention.h"

namespace driftless::layers {

namespace {

constexpr const char* kOp = "attention replay";

const std::set<std::string> kTensorNames{"q",
                                         "k",
                                         "v",
                                         "d_out",
                                         "cu_seqlens_q",
                                         "cu_seqlens_k",
                                         "cu_seqlens_q_padded",
                                         "cu_seqlens_k_padded",
                                         "seqused_q",
                                         "seqused_k",
                                         "bias",
                                         "alibi_slopes",
                                         "relative_position_table"};
const std::set<std::string> kMetaKeys{
    "causal",        "window_left",       "window_right",
    "softmax_scale", "max_seqlen_q",      "max_seqlen_k",
    "score_mod",     "softcap",           "relative_position_max_distance",
    "deterministic", "first_doc_shift_q", "first_doc_shift_k"};

int64_t parse_int(const std::string& key, const std::string& s) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  DL_CHECK(!s.empty() && end && *end == '\0', kOp,
           "metadata " << key << " = \"" << s << "\" is not an integer");
  return v;
}

double parse_double(const std::string& key, const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  DL_CHECK(!s.empty() && end && *end == '\0', kOp,
           "metadata " << key << " = \"" << s << "\" is not a number");
  return v;
}

std::string fmt_double(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

// Longest real length of one side when max_seqlen is not in the file.
int64_t longest(const Tensor& cu, const Tensor& padded, const Tensor& seqused) {
  int64_t m = 0;
  if (seqused.defined() && seqused.dtype() == DType::i32) {
    for (int64_t x : seqused.to_vector<int64_t>()) m = std::max(m, x);
    return m;
  }
  if (!cu.defined() || cu.dtype() != DType::i32) return 0;
  std::vector<int64_t> c = cu.to_vector<int64_t>();
  for (size_t i = 1; i < c.size(); ++i) m = std::max(m, c[i] - c[i - 1]);
  return m;
}

}  // namespace

AttentionCall read_attention_call(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  for (const std::string& n : f.names())
    DL_CHECK(kTensorNames.count(n), kOp,
             path << ": unknown tensor \"" << n
                  << "\" (known: q, k, v, d_out, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_padded, "
                     "cu_seqlens_k_padded, seqused_q, seqused_k, bias, alibi_slopes, "
                     "relative_position_table)");
  for (const char* n : {"q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"})
    DL_CHECK(f.contains(n), kOp, path << ": tensor \"" << n << "\" is missing");
  auto get = [&](const char* n) { return f.contains(n) ? f.get(n) : Tensor(); };
  AttentionCall c;
  c.q = f.get("q");
  c.k = f.get("k");
  c.v = f.get("v");
  c.d_out = get("d_out");
  AttentionSpec& s = c.spec;
  s.cu_seqlens_q = f.get("cu_seqlens_q");
  s.cu_seqlens_k = f.get("cu_seqlens_k");
  s.cu_seqlens_q_padded = get("cu_seqlens_q_padded");
  s.cu_seqlens_k_padded = get("cu_seqlens_k_padded");
  s.seqused_q = get("seqused_q");
  s.seqused_k = get("seqused_k");
  s.bias = get("bias");
  s.max_seqlen_q = longest(s.cu_seqlens_q, s.cu_seqlens_q_padded, s.seqused_q);
  s.max_seqlen_k = longest(s.cu_seqlens_k, s.cu_seqlens_k_padded, s.seqused_k);
  std::string mod = "none";
  double softcap = 0;
  int64_t max_distance = 0;
  for (const auto& [key, value] : f.metadata()) {
    if (key.rfind("info.", 0) == 0) {
      c.info[key] = value;
      continue;
    }
    DL_CHECK(kMetaKeys.count(key), kOp,
             path << ": unknown metadata key \"" << key
                  << "\" (free-form notes go under keys starting with \"info.\")");
    if (key == "causal") {
      DL_CHECK(value == "true" || value == "false" || value == "1" || value == "0", kOp,
               "metadata causal = \"" << value << "\", expected true or false");
      s.causal = value == "true" || value == "1";
    } else if (key == "deterministic") {
      DL_CHECK(value == "true" || value == "false" || value == "1" || value == "0", kOp,
               "metadata deterministic = \"" << value << "\", expected true or false");
      s.deterministic = value == "true" || value == "1";
    } else if (key == "window_left") {
      s.window_left = parse_int(key, value);
    } else if (key == "window_right") {
      s.window_right = parse_int(key, value);
    } else if (key == "first_doc_shift_q") {
      s.first_doc_shift.q = parse_int(key, value);
    } else if (key == "first_doc_shift_k") {
      s.first_doc_shift.k = parse_int(key, value);
    } else if (key == "softmax_scale") {
      s.softmax_scale = parse_double(key, value);
    } else if (key == "max_seqlen_q") {
      s.max_seqlen_q = parse_int(key, value);
    } else if (key == "max_seqlen_k") {
      s.max_seqlen_k = parse_int(key, value);
    } else if (key == "score_mod") {
      mod = value;
    } else if (key == "softcap") {
      softcap = parse_double(key, value);
    } else if (key == "relative_position_max_distance") {
      max_distance = parse_int(key, value);
    }
  }
  if (mod == "none") {
  } else if (mod == "softcap") {
    s.score_mod = ScoreModSpec::make_softcap(softcap);
  } else if (mod == "alibi") {
    DL_CHECK(f.contains("alibi_slopes"), kOp,
             path << ": score_mod alibi needs tensor alibi_slopes");
    s.score_mod = ScoreModSpec::make_alibi(f.get("alibi_slopes"));
  } else if (mod == "relative_position") {
    DL_CHECK(f.contains("relative_position_table"), kOp,
             path << ": score_mod relative_position needs tensor relative_position_table");
    s.score_mod =
        ScoreModSpec::make_relative_position(f.get("relative_position_table"), max_distance);
  } else {
    DL_FAIL(kOp, path << ": metadata score_mod = \"" << mod
                      << "\", expected none, softcap, alibi or relative_position");
  }
  return c;
}

void write_attention_call(const std::string& path, const AttentionCall& c) {
  const AttentionSpec& s = c.spec;
  std::vector<std::pair<std::string, Tensor>> t{{"q", c.q}, {"k", c.k}, {"v", c.v}};
  auto add = [&](const char* n, const Tensor& x) {
    if (x.defined()) t.emplace_back(n, x);
  };
  add("d_out", c.d_out);
  add("cu_seqlens_q", s.cu_seqlens_q);
  add("cu_seqlens_k", s.cu_seqlens_k);
  add("cu_seqlens_q_padded", s.cu_seqlens_q_padded);
  add("cu_seqlens_k_padded", s.cu_seqlens_k_padded);
  add("seqused_q", s.seqused_q);
  add("seqused_k", s.seqused_k);
  add("bias", s.bias);
  std::map<std::string, std::string> m = c.info;
  m["causal"] = s.causal ? "true" : "false";
  m["deterministic"] = s.deterministic ? "true" : "false";
  m["window_left"] = std::to_string(s.window_left);
  m["window_right"] = std::to_string(s.window_right);
  if (!s.first_doc_shift.zero()) {
    m["first_doc_shift_q"] = std::to_string(s.first_doc_shift.q);
    m["first_doc_shift_k"] = std::to_string(s.first_doc_shift.k);
  }
  if (s.softmax_scale) m["softmax_scale"] = fmt_double(*s.softmax_scale);
  m["max_seqlen_q"] = std::to_string(s.max_seqlen_q);
  m["max_seqlen_k"] = std::to_string(s.max_seqlen_k);
  m["score_mod"] = score_mod_name(s.score_mod.kind);
  if (s.score_mod.kind == ScoreModKind::softcap) m["softcap"] = fmt_double(s.score_mod.softcap);
  if (s.score_mod.kind == ScoreModKind::alibi) add("alibi_slopes", s.score_mod.alibi_slopes);
  if (s.score_mod.kind == ScoreModKind::relative_position) {
    add("relative_position_table", s.score_mod.relative_position_table);
    m["relative_position_max_distance"] =
        std::to_string(s.score_mod.relative_position_max_distance);
  }
  write_safetensors(path, t, m);
}

std::vector<std::pair<std::string, Tensor>> replay_attention(const AttentionCall& c,
                                                             const std::string& device) {
  DL_CHECK(device == "cpu" || device == "cuda", kOp,
           "device \"" << device << "\", expected cpu or cuda");
  const Device dev = device == "cuda" ? Device::cuda : Device::cpu;
  const Tensor q = c.q.to(dev), k = c.k.to(dev), v = c.v.to(dev);
  AttentionOutputs f = attention_forward(q, k, v, c.spec);
  std::vector<std::pair<std::string, Tensor>> r{{"out", f.out}, {"lse", f.lse}};
  if (!c.d_out.defined()) return r;
  AttentionGrads g = attention_backward(q, k, v, c.spec, f.out, f.lse, c.d_out.to(dev));
  r.emplace_back("dq", g.dq);
  r.emplace_back("dk", g.dk);
  r.emplace_back("dv", g.dv);
  if (g.dbias.defined()) r.emplace_back("dbias", g.dbias);
  if (c.spec.score_mod.kind == ScoreModKind::relative_position)
    r.emplace_back("d_relative_position_table", g.dscore_mod);
  return r;
}

void replay_attention_file(const std::string& in, const std::string& out,
                           const std::string& device) {
  AttentionCall c = read_attention_call(in);
  std::vector<std::pair<std::string, Tensor>> r = replay_attention(c, device);
  std::map<std::string, std::string> meta = read_safetensors(in).metadata();
  meta["device"] = device;
  write_safetensors(out, r, meta);
}

}  // namespace driftless::layers
