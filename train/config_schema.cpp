// The one config schema: every key with its range or allowed values and its help text, and
// the names of each enum's values. Parsing, dumping and `driftless config --reference` all
// walk visit_schema().
#include "train/config_schema.h"

namespace driftless::train {

namespace {

using layers::ContextParallel;

const EnumNames<DataFormat> kDataFormats{{"memmap", "llmc", "random"},
                                         {DataFormat::memmap, DataFormat::llmc, DataFormat::random}};
const EnumNames<data::LongDocuments> kLongDocuments{
    {"split", "truncate"}, {data::LongDocuments::split, data::LongDocuments::truncate}};
const EnumNames<optim::LrDecay> kLrDecays{
    {"cosine", "linear", "constant"},
    {optim::LrDecay::cosine, optim::LrDecay::linear, optim::LrDecay::constant}};
// size 1 is no context parallelism whatever the kind: `none` is not a kind.
const EnumNames<ContextParallel> kContextParallel{
    {"ring", "a2a", "hybrid"},
    {ContextParallel::ring, ContextParallel::a2a, ContextParallel::hybrid}};
const EnumNames<KvExchangeMode> kKvExchange{{"needed", "full"},
                                            {KvExchangeMode::needed, KvExchangeMode::full}};
const EnumNames<layers::Architecture> kArchitectures{
    {"gpt2", "llama"}, {layers::Architecture::gpt2, layers::Architecture::llama}};
const EnumNames<layers::Recompute> kRecompute{
    {"none", "attention", "full"},
    {layers::Recompute::none, layers::Recompute::attention, layers::Recompute::full}};
const EnumNames<Device> kDevices{{"cpu", "cuda"}, {Device::cpu, Device::cuda}};
const EnumNames<DType> kComputeDtypes{{"f32", "bf16"}, {DType::f32, DType::bf16}};

}  // namespace

const std::string& config_name(DataFormat v) { return kDataFormats.name(v); }
const std::string& config_name(data::LongDocuments v) { return kLongDocuments.name(v); }
const std::string& config_name(optim::LrDecay v) { return kLrDecays.name(v); }
const std::string& config_name(ContextParallel v) { return kContextParallel.name(v); }
const std::string& config_name(KvExchangeMode v) { return kKvExchange.name(v); }
const std::string& config_name(layers::Architecture v) { return kArchitectures.name(v); }
const std::string& config_name(layers::Recompute v) { return kRecompute.name(v); }

template <class C, class V>
void visit_schema_impl(C& c, V&& v) {
  const double kBig = 1e15;
  // model
  v(Field{"model.architecture", "gpt2: learned positions, LayerNorm, GELU MLP, biases; llama: rotary positions (restarting at every document), RMSNorm, SwiGLU MLP, no biases"}, enum_ref(c.model.architecture, kArchitectures));
  v(Field{"model.vocab_size", "tokens in the vocabulary (50257 for GPT-2, 257 for bytes)", 2, kBig}, c.model.vocab_size);
  v(Field{"model.n_positions", "gpt2: length of the learned position table, >= the longest document piece; llama: max_position_embeddings, a documented limit (no table, not checked)", 1, kBig}, c.model.n_positions);
  v(Field{"model.n_layer", "transformer blocks", 1, 1000}, c.model.n_layer);
  v(Field{"model.n_head", "query heads per attention layer", 1, 1024}, c.model.n_head);
  v(Field{"model.n_kv_head", "key/value heads (GQA); 0 means n_head", 0, 1024}, c.model.n_kv_head);
  v(Field{"model.n_embd", "model width; divisible by n_head", 1, 1e6}, c.model.n_embd);
  v(Field{"model.dropout", "dropout probability on the embeddings and every residual branch; an element's mask follows its token's place in the global batch, so every layout drops the same elements", 0, 0.999}, c.model.dropout);
  v(Field{"model.softcap", "attention score softcap c (c*tanh(s/c)); 0 is off", 0, 1e6}, c.model.softcap);
  v(Field{"model.alibi", "ALiBi position biases in attention (in addition to learned positions)"}, c.model.alibi);
  v(Field{"model.intermediate_size", "llama: SwiGLU MLP width; 0 means 4 n_embd", 0, 1e7}, c.model.intermediate_size);
  v(Field{"model.rms_norm_eps", "llama: RMSNorm epsilon", 0, 1}, c.model.rms_norm_eps);
  v(Field{"model.rope_theta", "llama: rotary embedding base; a token's rotary position is its index in its document", 1, 1e12}, c.model.rope_theta);
  v(Field{"model.tie_word_embeddings", "llama: the LM head is the token embedding (false: a separate lm_head.weight)"}, c.model.tie_word_embeddings);
  v(Field{"model.sliding_window", "llama: a query attends to the last W keys of its document, itself included (Mistral-style); 0 is off", 0, 1e9}, c.model.sliding_window);
  v(Field{"model.score_mod", "attention score modifier expression of score, q, k, h and score_mod_params (README \"Score and mask expressions\"); CPU, and CUDA (bf16, head_dim 64/128; compiled at run time); empty is off"}, c.model.score_mod);
  v(Field{"model.mask_mod", "attention mask expression of q, k, h: a boolean, intersected with the causal and document masks; on CPU and on CUDA (bf16, head_dim 64 or 128: run-time compiled kernels, which skip the tiles it hides whole); empty is off"}, c.model.mask_mod);
  v(Field{"model.score_mod_params", "parameters of score_mod / mask_mod: name -> {shape: [] | [heads] | [heads, n], init: a number or n values, learnable: false}; learnable: true trains one table per layer in the parameter slab (CPU and CUDA; on CUDA the entries the heads of one GQA group read, a table subscripted by h first, else every entry, at most 4096)"}, c.model.score_mod_params);
  // attention
  v(Field{"attention.kernel_cache.capacity", "run-time compiled attention kernels (of score_mod / mask_mod expressions) held loaded in memory; the least recently used beyond it are dropped", 1, 1e6}, c.attention.kernel_cache.capacity);
  v(Field{"attention.kernel_cache.dir", "directory of the compiled kernels' binaries, shared by later runs and the ranks of a host (a restarted run compiles nothing); empty: $DRIFTLESS_KERNEL_CACHE, else $XDG_CACHE_HOME/driftless/kernels, else ~/.cache/driftless/kernels; off: memory only"}, c.attention.kernel_cache.dir);
  // data
  v(Field{"data.format", "dataset format"}, enum_ref(c.data.format, kDataFormats));
  v(Field{"data.path", "memmap .bin/.idx prefix, or llm.c shard; relative to the working directory"}, c.data.path);
  v(Field{"data.validation_path", "validation dataset (same format); empty: no validation"}, c.data.validation_path);
  v(Field{"data.tokenizer", "tokenizer used for sampling text: gpt2, bytes, or the path of a HuggingFace byte-level BPE tokenizer.json"}, c.data.tokenizer);
  v(Field{"data.long_documents", "documents longer than a sequence"}, enum_ref(c.data.long_documents, kLongDocuments));
  v(Field{"data.pad_documents_to", "round every document up to a multiple of N with padding (0: off)", 0, 1 << 20}, c.data.pad_documents_to);
  v(Field{"data.shuffle", "shuffle document order every epoch (seeded)"}, c.data.shuffle);
  v(Field{"data.random_documents", "random format: number of documents", 1, kBig}, c.data.random_documents);
  v(Field{"data.random_mean_length", "random format: mean document length", 1, kBig}, c.data.random_mean_length);
  v(Field{"data.random_max_length", "random format: longest document", 1, kBig}, c.data.random_max_length);
  v(Field{"data.random_distribution", "random format: length distribution", 0, 0, {"exponential", "uniform", "fixed"}}, c.data.random_distribution);
  // batch
  v(Field{"batch.sequence_length", "tokens per packed sequence (S)", 1, 1 << 24}, c.batch.sequence_length);
  v(Field{"batch.sequences", "sequences per optimizer step (global batch B)", 1, 1 << 20}, c.batch.sequences);
  // schedule
  v(Field{"schedule.micro_sequences", "pieces each sequence is cut into, processed in order (m)", 1, 1 << 16}, c.schedule.micro_sequences);
  v(Field{"schedule.breadth_first", "micro-batches run forward all, then backward all", 1, 1 << 16}, c.schedule.breadth_first);
  v(Field{"schedule.depth_first", "micro-batches each run forward+backward (gradient accumulation)", 1, 1 << 16}, c.schedule.depth_first);
  // optimizer
  v(Field{"optimizer.lr", "peak learning rate", 0, 10}, c.optimizer.lr);
  v(Field{"optimizer.min_lr", "learning rate at the end of decay", 0, 10}, c.optimizer.min_lr);
  v(Field{"optimizer.warmup_steps", "linear warm-up steps", 0, kBig}, c.optimizer.warmup_steps);
  v(Field{"optimizer.decay", "decay after warm-up"}, enum_ref(c.optimizer.decay, kLrDecays));
  v(Field{"optimizer.beta1", "AdamW beta1", 0, 0.999999}, c.optimizer.beta1);
  v(Field{"optimizer.beta2", "AdamW beta2", 0, 0.999999}, c.optimizer.beta2);
  v(Field{"optimizer.eps", "AdamW epsilon", 0, 1}, c.optimizer.eps);
  v(Field{"optimizer.weight_decay", "decoupled weight decay (not on biases and layer-norm gains)", 0, 10}, c.optimizer.weight_decay);
  v(Field{"optimizer.grad_clip", "global gradient-norm clip (0: off)", 0, 1e9}, c.optimizer.grad_clip);
  // training
  v(Field{"training.steps", "optimizer steps", 1, kBig}, c.training.steps);
  v(Field{"training.eval_interval", "steps between validation losses (0: off)", 0, kBig}, c.training.eval_interval);
  v(Field{"training.eval_batches", "global batches per validation", 1, kBig}, c.training.eval_batches);
  v(Field{"training.checkpoint_interval", "steps between checkpoints (0: only at the end)", 0, kBig}, c.training.checkpoint_interval);
  v(Field{"training.keep_checkpoints", "newest checkpoints kept in run.output_dir/checkpoints; older ones are deleted after each checkpoint (0: keep all). Keep 2 or more so that --resume can fall back past a damaged newest one", 0, kBig}, c.training.keep_checkpoints);
  v(Field{"training.max_nonfinite_steps", "consecutive steps whose loss or gradient norm is NaN or infinite (their updates are skipped) that stop the run with an error naming the first non-finite gradient; 1 stops at the first", 1, kBig}, c.training.max_nonfinite_steps);
  v(Field{"training.log_interval", "steps between progress lines and metrics", 1, kBig}, c.training.log_interval);
  v(Field{"training.seed", "seed of data order, initialisation and dropout", 0, 9e15}, c.training.seed);
  v(Field{"training.deterministic", "bitwise reproducible runs (fixed reduction orders, no atomics); false lets the CUDA attention backward sum dQ with atomic adds on Hopper GPUs (faster; the bits of the gradients then vary from run to run). Everything else is always deterministic"}, c.training.deterministic);
  v(Field{"training.init_from", "checkpoint whose model weights start the run instead of the seeded initialisation (another run's, or `driftless import --hf`'s); its model section must match model; no step or optimizer state is taken from it; --resume ignores it"}, c.training.init_from);
  v(Field{"training.recompute", "activation recomputation (checkpointing): none keeps every block's activations for the backward (fastest; activation memory grows with the tokens in flight: every micro-sequence's activations are kept); full keeps only each block's input (one (T, n_embd) tensor per layer) and reruns the block's forward in its backward (about a third more compute, activation memory of one block); attention reruns only the attention branch (QKV projection, route, output projection) and keeps the layer norms' and MLP's activations (saves the QKV, attention output and LSE, about 5 n_embd per token and layer; costs the QKV and output projections and the attention forward again). Exact: the gradients are the same bits as without it. The route's forward (K/V buffer writes, exchanges) runs again in the backward, in the same order on every rank"}, enum_ref(c.training.recompute, kRecompute));
  // distributed
  v(Field{"distributed.sequence_data_parallel", "ranks sharing one sequence (SDP)", 1, 1 << 16}, c.distributed.sequence_data_parallel);
  v(Field{"distributed.context_parallel.size", "ranks sharing one sequence by context parallelism (instead of SDP; the world is data_parallel x size)", 1, 1 << 16}, c.distributed.context_parallel.size);
  v(Field{"distributed.context_parallel.kind", "ring: each rank holds micro-sequence chunks r and 2P-1-r (load-balanced causal), the ranks all-gather their K/V chunks into the K/V buffer and each query chunk is one attention call over its extent; a2a (Ulysses): all-to-all from tokens to heads before attention and back after it (n_head and n_kv_head divisible by size); hybrid: a2a inside groups of group_size consecutive ranks and the ring across the size / group_size groups (each group holds the ring's chunk pair, each rank a piece of both), so size may exceed n_kv_head"}, enum_ref(c.distributed.context_parallel.kind, kContextParallel));
  v(Field{"distributed.context_parallel.group_size", "hybrid only: ranks per all-to-all group (consecutive ranks, a fast link); must divide size, n_head and n_kv_head. group_size = size is a2a's split of heads, 1 the ring's", 1, 1 << 16}, c.distributed.context_parallel.group_size);
  v(Field{"distributed.data_parallel", "ranks splitting the batch", 1, 1 << 16}, c.distributed.data_parallel);
  v(Field{"distributed.zero_stage", "0: all-reduce gradients; 1 (ZeRO-1): reduce-scatter gradients, shard optimizer state over the data group, all-gather parameters", 0, 1}, c.distributed.zero_stage);
  v(Field{"distributed.bucket_mb", "size of the gradient buckets (MiB of f32 gradients) all-reduced during the backward (on GPU overlapped with it, on a side stream; 100 was 0.6% faster than 25 on 4 H200s, BENCHMARKS.md); 0: one all-reduce after the backward", 0, 1e5}, c.distributed.bucket_mb);
  v(Field{"distributed.kv_exchange", "SDP K/V exchange per layer: needed moves only the rows another rank reads (the tail of each rank's chunk that a document crossing into the next chunk reaches back to); full all-gathers / reduce-scatters whole chunks"}, enum_ref(c.distributed.kv_exchange, kKvExchange));
  v(Field{"distributed.timeout_seconds", "a collective waiting longer ends the job", 1, 1e6}, c.distributed.timeout_seconds);
  // precision
  v(Field{"precision.device", "where the run computes"}, enum_ref(c.precision.device, kDevices));
  v(Field{"precision.compute", "compute dtype: bf16 runs matrix products, activations and K/V in bf16 with f32 master weights, f32 gradients and f32 accumulation in every reduction (cuda only)"}, enum_ref(c.precision.compute, kComputeDtypes));
  v(Field{"precision.peak_tflops", "the GPU's peak dense TFLOP/s in the compute dtype, for the MFU that train reports; 0: looked up from the GPU's name (H100/H200, A100)", 0, 1e5}, c.precision.peak_tflops);
  // run
  v(Field{"run.output_dir", "run directory: effective config, metrics.jsonl, checkpoints, tensor logs"}, c.run.output_dir);
  v(Field{"run.tensor_logs.steps", "steps whose tensors are logged", 0, kBig}, c.run.tensor_logs.steps);
  v(Field{"run.tensor_logs.kinds", "which tensors to log", 0, 0, {"forward", "backward", "param_grad", "param"}}, c.run.tensor_logs.kinds);
}

void visit_schema(Config& c, const FieldVisitor& v) {
  visit_schema_impl(c, [&](const Field& f, auto&& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, EnumRef>) v(f, value);
    else v(f, FieldRef(&value));
  });
}

}  // namespace driftless::train
