# cmake -DMODE=tied|untied|sharded|bf16|train|refuse -DDRIFTLESS=<binary> -DPYTHON=<python3>
#   -DSOURCE=<repo root> -DDIR=<scratch> -P hf_llama_check.cmake
# The Llama checks behind tests/e2e/hf.cmake (fixture: tests/reference/write_hf_llama_fixture.py).
include(${CMAKE_CURRENT_LIST_DIR}/e2e_common.cmake)
reset_dir("${DIR}")
set(fixture "${SOURCE}/tests/reference/write_hf_llama_fixture.py")
set(hf "${DIR}/hf")
set(ckpt "${DIR}/imported.safetensors")

if(MODE STREQUAL "train")
  # Train 2 steps from an imported untied GQA Llama (training.init_from) and sample the run.
  run_checked(out 0 "${PYTHON}" "${fixture}" write "${hf}" --variant untied)
  run_checked(out 0 "${DRIFTLESS}" import --hf "${hf}" --out "${ckpt}" --set data.tokenizer=bytes)
  foreach(want "training.init_from=" "model.architecture=llama" "model.n_kv_head=2"
          "model.tie_word_embeddings=false" "model.intermediate_size=48")
    string(FIND "${out}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "import does not say '${want}'")
    endif()
  endforeach()
  set(config "${DIR}/config.yaml")
  write_tiny_config("${config}" "steps: 2, eval_interval: 0, seed: 11, init_from: ${ckpt}")
  set(llama --set model.architecture=llama --set model.n_kv_head=2 --set model.intermediate_size=48
            --set model.tie_word_embeddings=false --set model.rms_norm_eps=1e-5
            --set model.rope_theta=10000)
  run_checked(out 0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/run"
              ${llama})
  read_losses("${DIR}/run" losses)
  list(LENGTH losses n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "metrics.jsonl holds ${n} losses, expected 2: ${losses}")
  endif()
  run_checked(text 0 "${DRIFTLESS}" sample -c "${DIR}/run" -p "Hello" -n 8 --top-k 1)
  if(NOT text MATCHES "^Hello")
    message(FATAL_ERROR "sample output does not start with the prompt: '${text}'")
  endif()
  # The trained run exports back to a LlamaForCausalLM directory, sharded on request.
  run_checked(out 0 "${DRIFTLESS}" export --checkpoint "${DIR}/run" --hf "${DIR}/export"
              --max-shard-bytes 20000)
  if(NOT EXISTS "${DIR}/export/model.safetensors.index.json")
    message(FATAL_ERROR "export --max-shard-bytes wrote no index")
  endif()
  run_checked(out 0 "${DRIFTLESS}" import --hf "${DIR}/export" --out "${DIR}/again.safetensors")
elseif(MODE STREQUAL "refuse")
  # What our Llama cannot run is refused naming the key; another model_type is named.
  run_checked(out 0 "${PYTHON}" "${fixture}" write "${hf}" --variant tied)
  file(READ "${hf}/config.json" cfg)
  string(REPLACE "\"rope_type\": \"default\"" "\"rope_type\": \"yarn\"" bad "${cfg}")
  file(WRITE "${hf}/config.json" "${bad}")
  run_checked(out 1 "${DRIFTLESS}" import --hf "${hf}" --out "${ckpt}")
  if(NOT out_err MATCHES "rope_type \"yarn\"")
    message(FATAL_ERROR "a yarn rope_parameters is not refused by name")
  endif()
  string(REPLACE "\"model_type\": \"llama\"" "\"model_type\": \"qwen2\"" bad "${cfg}")
  file(WRITE "${hf}/config.json" "${bad}")
  run_checked(out 1 "${DRIFTLESS}" import --hf "${hf}" --out "${ckpt}")
  if(NOT out_err MATCHES "model_type \"qwen2\" is not supported")
    message(FATAL_ERROR "model_type qwen2 is not refused by name")
  endif()
else()
  # A variant: import, greedy ids equal the fixture model's (float64), export back, compare
  # value for value (sharded: export sharded too).
  run_checked(out 0 "${PYTHON}" "${fixture}" write "${hf}" --variant ${MODE})
  run_checked(out 0 "${DRIFTLESS}" import --hf "${hf}" --out "${ckpt}" --set data.tokenizer=bytes)
  run_checked(ids 0 "${DRIFTLESS}" sample -c "${ckpt}" --ids -p "72 101 108 108 111" -n 8
              --top-k 1)
  run_checked(want 0 "${PYTHON}" "${fixture}" greedy --variant ${MODE}
              --prompt 72,101,108,108,111 -n 8)
  string(STRIP "${ids}" ids)
  string(STRIP "${want}" want)
  if(NOT ids STREQUAL want)
    message(FATAL_ERROR "greedy ids of the import '${ids}', the fixture model's '${want}'")
  endif()
  set(shard_args)
  set(shards 0)
  if(MODE STREQUAL "sharded")
    set(shard_args --max-shard-bytes 40000)
    set(shards 4)
  endif()
  run_checked(out 0 "${DRIFTLESS}" export --checkpoint "${ckpt}" --hf "${DIR}/export" ${shard_args})
  run_checked(out 0 "${PYTHON}" "${fixture}" check "${DIR}/export" --variant ${MODE}
              --shards ${shards})
endif()
