// Conversion between our GPT-2 (layers/gpt.h) and a HuggingFace transformers GPT-2
// directory (`driftless export --hf` / `driftless import --hf`): config.json with
// GPT2Config keys and model.safetensors with GPT2LMHeadModel names. transformers' Conv1D
// stores weights (in, out), ours are (out, in), so c_attn, c_proj and c_fc are transposed.
// Note: transformers numbers positions 0..T-1 over the whole input unless given
// position_ids; our model restarts them at every document start.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "layers/gpt.h"
#include "layers/hf_files.h"

namespace driftless::layers {

// A model in our names ("h.0.attn.c_attn.weight") and layouts ((out, in) weights).
using HfGpt2 = HfModel;

// GPT2Config keys for `config`. Throws when the model is not expressible as GPT-2:
// GQA (n_kv_head != n_head), softcap, ALiBi. bos/eos_token_id are `end_of_text` (the run's
// tokenizer's; -1: 50256 when vocab_size is GPT-2's 50257), written as null when outside
// the vocabulary, so transformers neither assumes GPT-2's 50256 nor stops generate() wrongly.
nlohmann::json hf_gpt2_config(const GptConfig& config, int64_t end_of_text = -1);
// Our config from a GPT2Config JSON (missing keys take GPT2Config's defaults). Throws on
// what our model cannot run: another model_type, GQA, an activation other than the tanh
// GELU, layer_norm_epsilon != 1e-5, n_inner != 4 n_embd, untied embeddings, unscaled or
// layer-scaled attention.
GptConfig gpt_config_from_hf(const nlohmann::json& hf);

// Our parameter name -> the HF name ("transformer." + name) and back ("" when `hf_name`
// is not a parameter of ours). Both prefixed and bare names ("h.0.ln_1.weight", as in the
// hub's gpt2 file) are accepted.
std::string hf_gpt2_name(const std::string& name);
std::string gpt_name_from_hf(const std::string& hf_name);
// Names and shapes (ours) of the parameters of a Gpt with `config`, in slab order, without
// allocating one (tests check it against Gpt's slab).
std::vector<std::pair<std::string, Shape>> gpt_parameter_shapes(const GptConfig& config);
// True for the Conv1D weights that are stored transposed in HF files.
bool hf_gpt2_transposed(const std::string& name);

// Writes DIR/config.json and DIR/model.safetensors (metadata format "pt", which
// transformers requires; lm_head.weight omitted, as save_pretrained does for the tied
// head). Creates DIR. `params` must hold every parameter of a Gpt with `config`. With
// max_shard_bytes > 0, shards and an index as save_pretrained's max_shard_size writes them.
void save_hf_gpt2(const GptConfig& config, const std::map<std::string, Tensor>& params,
                  const std::string& dir, int64_t end_of_text = -1, int64_t max_shard_bytes = 0);
void save_hf_gpt2(const Gpt& model, const std::string& dir, int64_t end_of_text = -1,
                  int64_t max_shard_bytes = 0);

// Reads a directory as transformers' save_pretrained writes it: config.json (keys we do
// not use, e.g. transformers_version, dtype, summary_*, are ignored) and model.safetensors,
// or model.safetensors.index.json and its shards. Ignores the attn.bias / attn.masked_bias
// buffers of old files (bool, uint8 or f32) and a lm_head.weight equal to wte.weight; any
// other unknown tensor, a missing parameter or a wrong shape is an error naming it. Weights
// (f32, bf16, f16) are converted to f32. Without safetensors weights (pytorch_model.bin
// only) the error says how to convert.
HfGpt2 load_hf_gpt2(const std::string& dir);

}  // namespace driftless::layers
