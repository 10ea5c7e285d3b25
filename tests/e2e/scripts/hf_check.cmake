# cmake -DMODE=v4|v5|legacy|sharded|fp16|bin|train -DDRIFTLESS=<binary> -DPYTHON=<python3>
#   -DSOURCE=<repo root> -DDIR=<scratch> -P hf_check.cmake
# The checks behind tests/e2e/hf.cmake; each starts from an empty DIR.
include(${CMAKE_CURRENT_LIST_DIR}/e2e_common.cmake)
reset_dir("${DIR}")
set(fixture "${SOURCE}/tests/reference/write_hf_fixture.py")

set(hf "${DIR}/hf")
set(ckpt "${DIR}/imported.safetensors")

if(MODE STREQUAL "bin")
  # Only pytorch_model.bin: refused, with what is missing and how to convert.
  run_checked(out 0 "${PYTHON}" "${fixture}" write "${hf}" --variant bin)
  run_checked(out 1 "${DRIFTLESS}" import --hf "${hf}" --out "${ckpt}")
  foreach(want "has no model.safetensors" "it has pytorch_model.bin"
          "Only safetensors weights are read" "safe_serialization=True")
    string(FIND "${out_err}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "stderr does not say '${want}'")
    endif()
  endforeach()
  if(EXISTS "${ckpt}")
    message(FATAL_ERROR "a checkpoint was written although the import failed")
  endif()
elseif(MODE STREQUAL "train")
  # Train from an imported directory (training.init_from) and sample from the run.
  run_checked(out 0 "${PYTHON}" "${fixture}" write "${hf}" --variant v4)
  run_checked(out 0 "${DRIFTLESS}" import --hf "${hf}" --out "${ckpt}" --set data.tokenizer=bytes)
  if(NOT out MATCHES "training.init_from=")
    message(FATAL_ERROR "import does not say how to train from the checkpoint")
  endif()
  set(config "${DIR}/config.yaml")
  write_tiny_config("${config}" "steps: 3, eval_interval: 0, seed: 11, init_from: ${ckpt}")
  # lr 0: one step leaves the weights as imported, bit for bit (init_from took them all).
  run_checked(out 0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/still"
              --set training.steps=1 --set optimizer.lr=0 --set optimizer.min_lr=0
              --set optimizer.warmup_steps=0)
  run_checked(out 0 "${DRIFTLESS}" export --checkpoint
              "${DIR}/still/checkpoints/step_000000.safetensors" --hf "${DIR}/still_hf")
  run_checked(out 0 "${PYTHON}" "${fixture}" check "${DIR}/still_hf" --variant v4)
  # Three real steps: the loss falls from the imported model's; same step-0 loss as above.
  run_checked(out 0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/run")
  read_losses("${DIR}/still" still)
  read_losses("${DIR}/run" losses)
  list(LENGTH losses n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "metrics.jsonl holds ${n} losses, expected 3: ${losses}")
  endif()
  list(GET losses 0 first)
  list(GET losses 2 last)
  if(NOT first STREQUAL still)
    message(FATAL_ERROR "step-0 loss ${first} differs from the lr-0 run's ${still}")
  endif()
  run_checked(fresh 0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/fresh"
              --set training.steps=1 --set "training.init_from=''")
  read_losses("${DIR}/fresh" fresh)
  if(fresh STREQUAL still)
    message(FATAL_ERROR "a seeded initialisation gives the imported model's loss ${still}")
  endif()
  execute_process(COMMAND awk "BEGIN { exit !(${last} < ${first}) }" RESULT_VARIABLE up)
  if(up)
    message(FATAL_ERROR "loss did not fall: ${losses}")
  endif()
  message("losses from the import: ${losses} (seeded init: ${fresh})")
  run_checked(text 0 "${DRIFTLESS}" sample -c "${DIR}/run" -p "Hello" -n 8 --top-k 1)
  if(NOT text MATCHES "^Hello")
    message(FATAL_ERROR "sample output does not start with the prompt: '${text}'")
  endif()
  run_checked(ids 0 "${DRIFTLESS}" sample -c "${DIR}/run" --ids -p "72,101,108" -n 8 --top-k 1)
  if(NOT ids MATCHES "^72 101 108( [0-9]+)+\n$")
    message(FATAL_ERROR "--ids output is not the prompt's ids and the new ones: '${ids}'")
  endif()
  string(REGEX MATCHALL "[0-9]+" id_list "${ids}")
  list(LENGTH id_list n_ids)
  if(NOT n_ids EQUAL 11)
    message(FATAL_ERROR "--ids -n 8 after 3 prompt ids printed ${n_ids} ids, expected 11")
  endif()
  # Another model shape: refused before any work, with the flags that would match.
  run_checked(out 1 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/bad"
              --set model.n_layer=3)
  if(NOT out_err MATCHES "--set model.n_layer=2")
    message(FATAL_ERROR "the init_from shape error does not name model.n_layer=2")
  endif()
else()
  # A variant: import, sample, export back, and the weights are the fixture's, value for value.
  # The greedy ids are the fixture model's own, computed by the fixture script in float64.
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
  run_checked(out 0 "${DRIFTLESS}" export --checkpoint "${ckpt}" --hf "${DIR}/export")
  run_checked(out 0 "${PYTHON}" "${fixture}" check "${DIR}/export" --variant ${MODE})
endif()
