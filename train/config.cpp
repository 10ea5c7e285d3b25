// Strict YAML loading of the run config: includes, overrides, type and range checks,
// cross-field rules, and dumping (see config.h). All problems go into one message.
#include "train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "engine/core/checked_size.h"
#include "engine/core/error.h"
#include "engine/core/regular_file.h"
#include "train/config_schema.h"

namespace driftless::train {

namespace {

namespace fs = std::filesystem;

// A score-modifier table is indexed by positions and heads; its entries (and, for learnable
// tables, one copy a layer) are bounded before anything is allocated for them.
constexpr int64_t kMaxParamEntries = int64_t(1) << 24;
constexpr int64_t kMaxLearnableEntries = int64_t(1) << 28;  // summed over tables and layers
// cu_seqlens and document offsets are int32: a global batch holds fewer tokens.
constexpr int64_t kMaxBatchTokens = (int64_t(1) << 31) - 1;

// A YAML document read from a regular file (a directory, a FIFO or a device is refused,
// never read) with its duplicate keys refused.
YAML::Node load_yaml_file(const std::string& path) {
  const std::string text = read_regular_file(path, "config", size_t(64) << 20);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    DL_FAIL("config", path << ": invalid YAML: " << e.what());
  }
  check_unique_keys(root, path);
  return root;
}

// Deep merge: keys of `over` replace those of `base`; maps merge recursively.
YAML::Node merge(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  YAML::Node out = YAML::Clone(base);
  for (const auto& kv : over) {
    std::string key = kv.first.as<std::string>();
    out[key] = out[key] ? merge(out[key], kv.second) : YAML::Clone(kv.second);
  }
  return out;
}

YAML::Node load_with_includes(const YAML::Node& root, const fs::path& base_dir, int depth) {
  DL_CHECK(depth < 16, "config", "include nesting deeper than 16 (a cycle?)");
  if (!root.IsMap() || !root["include"]) return root;
  YAML::Node inc = root["include"];
  std::vector<std::string> files;
  if (inc.IsScalar()) files.push_back(inc.as<std::string>());
  else if (inc.IsSequence())
    for (const auto& f : inc) files.push_back(f.as<std::string>());
  else DL_FAIL("config", "include: expected a file name or a list of file names");
  YAML::Node merged(YAML::NodeType::Map);
  for (const auto& f : files) {
    fs::path p = base_dir / f;
    DL_CHECK(fs::exists(p), "config", "include: file " << p.string() << " does not exist");
    const YAML::Node sub = load_yaml_file(p.string());
    merged = merge(merged, load_with_includes(sub, p.parent_path(), depth + 1));
  }
  YAML::Node own = YAML::Clone(root);
  own.remove("include");
  return merge(merged, own);
}

void apply_override(YAML::Node& root, const std::string& spec) {
  auto eq = spec.find('=');
  DL_CHECK(eq != std::string::npos && eq > 0, "config",
           "override '" << spec << "' must look like key.path=value");
  std::string path = spec.substr(0, eq), value = spec.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  DL_CHECK(!parts.empty() && path.back() != '.' &&
               std::none_of(parts.begin(), parts.end(), [](const auto& p) { return p.empty(); }),
           "config",
           "override '" << spec << "': expected a key path like optimizer.lr, got '" << path
                        << "' (an empty key)");
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception&) {
    parsed = YAML::Node(value);
  }
  check_unique_keys(parsed, "override '" + spec + "'");
  // yaml-cpp node assignment aliases; walk with fresh handles.
  std::function<void(YAML::Node, size_t)> set = [&](YAML::Node node, size_t i) {
    if (i + 1 == parts.size()) {
      node[parts[i]] = parsed;
      return;
    }
    if (!node[parts[i]] || !node[parts[i]].IsMap()) node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    set(node[parts[i]], i + 1);
  };
  set(root, 0);
}

// A score_mod_params shape: [], [heads] or [heads, n], each entry a positive integer (or
// "heads"), the table at most kMaxParamEntries entries; checked before anything is allocated.
std::vector<int64_t> read_param_shape(const YAML::Node& node, int64_t heads,
                                      const std::string& where) {
  DL_CHECK(node.IsSequence() && node.size() <= 2, "config",
           where << ".shape must be a list: [], [heads] or [heads, n]");
  std::vector<int64_t> shape;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string text = node[i].IsScalar() ? node[i].Scalar() : "a non-scalar";
    int64_t d = 0;
    if (text == "heads") {
      d = heads;
    } else {
      const auto r = std::from_chars(text.data(), text.data() + text.size(), d);
      DL_CHECK(r.ec == std::errc() && r.ptr == text.data() + text.size() && d > 0, "config",
               where << ".shape[" << i << "]: expected a positive integer or heads, got " << text);
    }
    DL_CHECK(d <= kMaxParamEntries, "config",
             where << ".shape[" << i << "]: expected at most " << kMaxParamEntries << ", got "
                   << text);
    shape.push_back(d);
  }
  const std::optional<int64_t> n = checked_product(shape);
  DL_CHECK(n && *n <= kMaxParamEntries, "config",
           where << ".shape: expected a table of at most " << kMaxParamEntries
                 << " entries, got " << shape.size() << " dimensions "
                 << (shape.size() == 2 ? std::to_string(shape[0]) + " x " + std::to_string(shape[1])
                                       : std::string()));
  return shape;
}

// A score_mod_params init value: a finite number.
double finite_init(const YAML::Node& node, const std::string& where) {
  double v = 0;
  try {
    v = node.as<double>();
  } catch (const YAML::Exception&) {
    DL_FAIL("config", where << ".init: expected a number, got " << node_excerpt(node));
  }
  DL_CHECK(std::isfinite(v), "config", where << ".init: expected a finite number, got " << v);
  return v;
}

// model.score_mod / mask_mod / score_mod_params: the parameters read into
// model.score_mod_decls and both expressions compiled (their errors name the column) at load.
void resolve_score_mods(Config& c, std::vector<std::string>& errors) {
  auto& m = c.model;
  m.score_mod_decls.clear();
  if (m.score_mod.empty() && m.mask_mod.empty()) {
    if (!m.score_mod_params.empty())
      errors.push_back("model.score_mod_params needs model.score_mod or model.mask_mod");
    return;
  }
  int64_t learnable_entries = 0;
  try {
    for (const auto& [name, text] : m.score_mod_params) {
      // The name reaches the generated GPU code: an identifier only, checked before its use.
      const std::string bad_name = layers::expr::param_name_problem(name);
      DL_CHECK(bad_name.empty(), "config", "model.score_mod_params: " << bad_name);
      const std::string where = "model.score_mod_params." + name;
      const YAML::Node n = YAML::Load(text);
      DL_CHECK(n.IsMap(), "config", where << " must be a mapping {shape, init, learnable}");
      for (const auto& kv : n) {
        const std::string key = kv.first.as<std::string>();
        DL_CHECK(key == "shape" || key == "init" || key == "learnable", "config",
                 where << ": unknown key '" << key << "' (known: shape, init, learnable)");
      }
      layers::expr::ParamDecl d;
      d.name = name;
      if (n["shape"]) d.shape = read_param_shape(n["shape"], m.n_head, where);
      d.learnable = n["learnable"] && n["learnable"].as<bool>();
      learnable_entries += d.learnable ? d.numel() * m.n_layer : 0;
      DL_CHECK(learnable_entries <= kMaxLearnableEntries, "config",
               where << ": the learnable tables hold " << learnable_entries
                     << " entries over model.n_layer " << m.n_layer << " layers, expected at most "
                     << kMaxLearnableEntries);
      const YAML::Node init = n["init"];
      DL_CHECK(init, "config", where << ".init is required: a number or " << d.numel() << " values");
      if (init.IsSequence()) {
        DL_CHECK(int64_t(init.size()) == d.numel(), "config",
                 where << ".init: expected one number or " << d.numel() << " values, got "
                       << init.size());
        for (const auto& x : init) d.init.push_back(finite_init(x, where));
      } else {
        d.init.assign(size_t(d.numel()), finite_init(init, where));
      }
      m.score_mod_decls.push_back(d);
    }
    std::shared_ptr<const layers::expr::Program> sm, mm;
    if (!m.score_mod.empty()) sm = layers::expr::compile_score_mod(m.score_mod, m.score_mod_decls, int(m.n_head));
    if (!m.mask_mod.empty()) mm = layers::expr::compile_mask_mod(m.mask_mod, m.score_mod_decls, int(m.n_head));
    DL_CHECK(!m.alibi && m.softcap == 0, "config",
             "model.score_mod / mask_mod replace model.softcap and model.alibi; write them as "
             "expressions (30 * tanh(score / 30), score - slope[h] * abs(q - k))");
    // On CUDA score_mod and mask_mod run in the fast kernels, compiled at run time
    // (layers/attention/jit/).
    // Learnable tables on CUDA: a dK/dV block of the backward keeps the entries its GQA
    // group's heads read (layers/attention/cuda/fast/param_grad.cuh).
    if (sm && sm->param_count > 0 && c.precision.device == Device::cuda && m.kv_heads() > 0) {
      const int64_t group = m.n_head / m.kv_heads();
      const int64_t slots = layers::expr::grad_slots(*sm, group);
      DL_CHECK(slots <= layers::expr::kMaxGradSlots, "config",
               "model.score_mod_params: on CUDA the learnable tables an attention block keeps "
               "for its " << group << " query heads are at most " << layers::expr::kMaxGradSlots
               << " entries, these have " << slots << " (a table not subscripted by h first "
               "counts whole); use smaller tables or precision.device: cpu");
    }
    // The ring's calls hold parts of a document and pass its positions as a shift (spec.h
    // "Positions") that the CPU kernels and the CUDA expression kernels apply.
    // The model is causal and a mask is intersected with that (a query's later keys are in
    // no layout's K extent): q - k < 256 is a sliding window; a mask cannot show later keys.
  } catch (const YAML::Exception& e) {
    errors.push_back(std::string("model.score_mod_params: ") + e.what());
  } catch (const Error& e) {
    errors.push_back(e.what());
  }
}

void cross_check(const Config& c, std::vector<std::string>& errors) {
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) errors.push_back(msg);
  };
  const auto& m = c.model;
  need(m.n_embd % m.n_head == 0, "model.n_embd (" + std::to_string(m.n_embd) +
                                     ") must be divisible by model.n_head (" +
                                     std::to_string(m.n_head) + ")");
  need(m.n_head % m.kv_heads() == 0, "model.n_head (" + std::to_string(m.n_head) +
                                         ") must be divisible by model.n_kv_head (" +
                                         std::to_string(m.kv_heads()) + ")");
  if (m.is_llama()) {
    need(m.n_embd % m.n_head != 0 || m.head_dim() % 2 == 0,
         "model.architecture llama needs an even head dim for rotary positions; n_embd (" +
             std::to_string(m.n_embd) + ") / n_head (" + std::to_string(m.n_head) + ") is " +
             std::to_string(m.head_dim()));
  } else {
    // The llama-only keys away from their defaults would silently do nothing for gpt2.
    const layers::GptConfig d;
    std::vector<std::string> set;
    if (m.intermediate_size != d.intermediate_size) set.push_back("intermediate_size");
    if (m.rms_norm_eps != d.rms_norm_eps) set.push_back("rms_norm_eps");
    if (m.rope_theta != d.rope_theta) set.push_back("rope_theta");
    if (m.tie_word_embeddings != d.tie_word_embeddings) set.push_back("tie_word_embeddings");
    if (m.sliding_window != d.sliding_window) set.push_back("sliding_window");
    for (const std::string& key : set)
      errors.push_back("model." + key + " is a model.architecture llama key; gpt2 takes only its "
                       "default");
  }
  const int64_t S = c.batch.sequence_length, ms = c.schedule.micro_sequences;
  const int64_t sdp = c.distributed.sequence_data_parallel;
  need(S % ms == 0, "batch.sequence_length (" + std::to_string(S) +
                        ") must be divisible by schedule.micro_sequences (" +
                        std::to_string(ms) + ")");
  need((S / ms) % sdp == 0, "a micro-sequence (" + std::to_string(S / ms) +
                                " tokens) must divide over distributed.sequence_data_parallel (" +
                                std::to_string(sdp) + ")");
  const ContextParallelConfig& cp = c.distributed.context_parallel;
  if (cp.size > 1) {
    const std::string P = std::to_string(cp.size);
    need(sdp == 1, "distributed.context_parallel.size (" + P +
                       ") and distributed.sequence_data_parallel (" + std::to_string(sdp) +
                       ") both share sequences; choose one");
    if (cp.kind == layers::ContextParallel::hybrid)
      need(cp.size % cp.group_size == 0 && m.n_head % cp.group_size == 0 &&
               m.kv_heads() % cp.group_size == 0,
           "distributed.context_parallel.group_size (" + std::to_string(cp.group_size) +
               ") must divide its size (" + P + "), model.n_head (" + std::to_string(m.n_head) +
               ") and the key/value heads (" + std::to_string(m.kv_heads()) + ")");
    if (cp.kind != layers::ContextParallel::a2a) {
      need((S / ms) % (2 * cp.size) == 0,
           "a micro-sequence (" + std::to_string(S / ms) +
               " tokens) must divide into 2 x distributed.context_parallel.size (" +
               std::to_string(2 * cp.size) + ") chunks for the ring");
      need(c.data.pad_documents_to <= 1,
           "distributed.context_parallel.kind ring and hybrid do not take data.pad_documents_to "
           "yet; use kind a2a or sequence_data_parallel");
    } else {
      need((S / ms) % cp.size == 0, "a micro-sequence (" + std::to_string(S / ms) +
                                        " tokens) must divide over distributed.context_parallel.size (" +
                                        P + ")");
      need(m.n_head % cp.size == 0 && m.kv_heads() % cp.size == 0,
           "distributed.context_parallel.kind a2a needs model.n_head (" + std::to_string(m.n_head) +
               ") and the key/value heads (" + std::to_string(m.kv_heads()) +
               ") divisible by its size (" + P + ")");
    }
  }
  const std::optional<int64_t> tokens = checked_mul(c.batch.sequences, S);
  need(tokens && *tokens <= kMaxBatchTokens,
       "batch.sequences (" + std::to_string(c.batch.sequences) + ") x batch.sequence_length (" +
           std::to_string(S) + ") must be at most " + std::to_string(kMaxBatchTokens) +
           " tokens in a global batch (document offsets are int32)");
  const int64_t split = c.distributed.data_parallel * c.schedule.breadth_first *
                        c.schedule.depth_first;
  need(c.batch.sequences % split == 0,
       "batch.sequences (" + std::to_string(c.batch.sequences) +
           ") must be divisible by data_parallel x breadth_first x depth_first (" +
           std::to_string(split) + ")");
  need(c.data.format == DataFormat::random || !c.data.path.empty(),
       "data.path is required for data.format " + config_name(c.data.format));
  need(c.precision.compute == DType::f32 || c.precision.device == Device::cuda,
       "precision.compute bf16 needs precision.device cuda");
  need(c.optimizer.min_lr <= c.optimizer.lr, "optimizer.min_lr must not exceed optimizer.lr");
  need(c.optimizer.warmup_steps <= c.training.steps,
       "optimizer.warmup_steps (" + std::to_string(c.optimizer.warmup_steps) +
           ") must not exceed training.steps (" + std::to_string(c.training.steps) + ")");
  need(c.data.pad_documents_to <= 1 || S % c.data.pad_documents_to == 0,
       "data.pad_documents_to must divide batch.sequence_length");
  need(c.data.random_mean_length <= c.data.random_max_length,
       "data.random_mean_length must not exceed data.random_max_length");
}

}  // namespace

static Config parse_config_node(const YAML::Node& root_in, const std::vector<std::string>& overrides,
                         const std::string& base_dir) {
  YAML::Node root = load_with_includes(root_in.IsNull() ? YAML::Node(YAML::NodeType::Map) : root_in,
                                       base_dir, 0);
  DL_CHECK(root.IsMap(), "config", "the top level must be a mapping of sections");
  for (const auto& o : overrides) apply_override(root, o);
  Config config;
  std::vector<std::string> errors;
  read_schema(
      root, [&](const FieldVisitor& v) { visit_schema(config, v); }, errors);
  if (errors.empty()) resolve_score_mods(config, errors);
  if (errors.empty()) cross_check(config, errors);
  if (!errors.empty()) {
    std::ostringstream os;
    os << errors.size() << " problem" << (errors.size() > 1 ? "s" : "") << " in the config:";
    for (const auto& e : errors) os << "\n  - " << e;
    DL_FAIL("config", os.str());
  }
  return config;
}

Config parse_config_text(const std::string& yaml, const std::vector<std::string>& overrides,
                         const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    DL_FAIL("config", "invalid YAML: " << e.what());
  }
  check_unique_keys(root, "the config");
  return parse_config_node(root, overrides, base_dir);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  DL_CHECK(fs::exists(path), "config", "file " << path << " does not exist");
  const YAML::Node root = load_yaml_file(path);
  try {
    return parse_config_node(root, overrides, fs::path(path).parent_path().string());
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "\n  (in " + path + ")");
  }
}

std::string config_to_yaml(const Config& config_in) {
  Config config = config_in;
  YAML::Node root(YAML::NodeType::Map);
  visit_schema(config, [&](const Field& f, FieldRef ref) {
    std::vector<std::string> parts;
    std::stringstream ss(f.path);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    YAML::Node value = field_node(ref);
    std::function<void(YAML::Node, size_t)> set = [&](YAML::Node n, size_t i) {
      if (i + 1 == parts.size()) {
        n[parts[i]] = value;
        return;
      }
      if (!n[parts[i]]) n[parts[i]] = YAML::Node(YAML::NodeType::Map);
      set(n[parts[i]], i + 1);
    };
    set(root, 0);
  });
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::pair<std::string, std::string>> config_entries(const Config& config_in) {
  Config config = config_in;
  std::vector<std::pair<std::string, std::string>> out;
  visit_schema(config, [&](const Field& f, FieldRef ref) {
    YAML::Emitter e;
    e << YAML::Flow << field_node(ref);
    out.emplace_back(f.path, e.c_str());
  });
  return out;
}

layers::jit::KernelCacheOptions kernel_cache_options(const Config& config) {
  const KernelCacheConfig& k = config.attention.kernel_cache;
  if (k.dir == "off") return {k.capacity, ""};
  return {k.capacity, k.dir.empty() ? layers::jit::default_cache_dir() : k.dir};
}

std::string config_reference() {
  Config defaults;
  return schema_reference([&](const FieldVisitor& v) { visit_schema(defaults, v); });
}

}  // namespace driftless::train
