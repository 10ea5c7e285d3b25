// Conversion between our Llama-family model (GptConfig::architecture llama) and a
// HuggingFace transformers LlamaForCausalLM directory: config.json with LlamaConfig keys and
// model.safetensors (or shards). Ours fuses q|k|v and gate|up row-wise; HF keeps them apart.
// RoPE: both use rotate_half on the same q/k weights, so no permutation. Positions restart at
// every document start in ours; transformers needs position_ids for packed inputs.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "layers/hf_files.h"

namespace driftless::layers {

using HfLlama = HfModel;

// LlamaConfig keys for `config` (architecture llama). Throws on what LlamaForCausalLM cannot
// express: sliding_window (Mistral's), softcap, ALiBi, n_embd not a multiple of n_head.
// rope_theta is written both as transformers 5 does (rope_parameters) and as 4.x does
// (rope_theta; rope_scaling is left out, which both read as none).
// bos/eos_token_id are `end_of_text` when inside the vocabulary, else null.
nlohmann::json hf_llama_config(const GptConfig& config, int64_t end_of_text = -1);
// Our config from a LlamaConfig JSON (missing keys take LlamaConfig's defaults). Throws,
// naming the key, on what our model cannot run: model_type other than "llama", hidden_act
// other than silu, attention_bias / mlp_bias true, head_dim != hidden_size / heads, rope
// scaling other than default (linear, dynamic, yarn, llama3, longrope ...), a head count that
// does not divide.
GptConfig llama_config_from_hf(const nlohmann::json& hf);

// Names and shapes (ours) of the parameters of a llama Gpt with `config`.
std::vector<std::pair<std::string, Shape>> llama_parameter_shapes(const GptConfig& config);

// Our parameters -> HF tensors (split q|k|v and gate|up, prefix "model.", lm_head.weight only
// when untied), in the order LlamaForCausalLM's state_dict lists them; and back.
std::vector<std::pair<std::string, Tensor>> hf_llama_tensors(
    const GptConfig& config, const std::map<std::string, Tensor>& params);

// Writes DIR/config.json and the weights (f32; max_shard_bytes > 0: shards and an index).
void save_hf_llama(const GptConfig& config, const std::map<std::string, Tensor>& params,
                   const std::string& dir, int64_t end_of_text = -1, int64_t max_shard_bytes = 0);
void save_hf_llama(const Gpt& model, const std::string& dir, int64_t end_of_text = -1,
                   int64_t max_shard_bytes = 0);

// Reads a save_pretrained directory (model.safetensors or shards; f32, bf16, f16). Ignores
// rotary_emb.inv_freq buffers and, when tied, a lm_head.weight equal to embed_tokens; any
// other unknown tensor, a missing one or a wrong shape is an error naming it.
HfLlama load_hf_llama(const std::string& dir);

}  // namespace driftless::layers
