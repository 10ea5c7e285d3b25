# cmake -DMODE=run|unknown_key|sdp|resume -DDRIFTLESS=<binary> -DDIR=<scratch>
#   [-DMPIRUN=<list>] [-DLAYOUT=<list of key=value>] -P train_check.cmake
# The checks behind tests/e2e/train.cmake; each starts from an empty DIR.
include(${CMAKE_CURRENT_LIST_DIR}/e2e_common.cmake)
reset_dir("${DIR}")

# A 3-step run on random documents; byte vocabulary so `sample` needs no vocabulary files.
set(config "${DIR}/config.yaml")
write_tiny_config("${config}" "steps: 3, eval_interval: 3, eval_batches: 1, seed: 11"
                  "schedule: {micro_sequences: 2}\nrun: {output_dir: ${DIR}/run}\n")

if(MODE STREQUAL "run")
  run_checked(out 0 "${DRIFTLESS}" train -c "${config}" -q)
  read_losses("${DIR}/run" losses)
  list(LENGTH losses n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "metrics.jsonl holds ${n} losses, expected 3: ${losses}")
  endif()
  if(NOT EXISTS "${DIR}/run/checkpoints/step_000002.safetensors" OR
     NOT EXISTS "${DIR}/run/config.yaml")
    message(FATAL_ERROR "no final checkpoint / effective config in ${DIR}/run")
  endif()
  if(NOT "${out_err}" MATCHES "summary: 3 steps, final loss [0-9.]+, validation loss [0-9.]+")
    message(FATAL_ERROR "no summary line on stderr")
  endif()
  run_checked(text 0 "${DRIFTLESS}" sample --checkpoint "${DIR}/run" --prompt "Hello" --tokens 8
              --top-k 1)
  if(NOT text MATCHES "^Hello")
    message(FATAL_ERROR "sample output does not start with the prompt: '${text}'")
  endif()
  # Greedy sampling is deterministic.
  run_checked(again 0 "${DRIFTLESS}" sample --checkpoint "${DIR}/run" --prompt "Hello"
              --tokens 8 --top-k 1)
  if(NOT again STREQUAL text)
    message(FATAL_ERROR "greedy sampling differs between runs")
  endif()
elseif(MODE STREQUAL "unknown_key")
  file(WRITE "${config}" "model: {n_layer: 2, n_head: 4, n_embd: 32, n_layr: 3}\n"
                         "training: {stpes: 3}\nrun: {output_dir: ${DIR}/run}\n")
  run_checked(out 1 "${DRIFTLESS}" train -c "${config}" -q)
  foreach(key "model.n_layr: unknown key" "training.stpes: unknown key")
    if(NOT "${out_err}" MATCHES "${key}")
      message(FATAL_ERROR "stderr does not name '${key}'")
    endif()
  endforeach()
  if(EXISTS "${DIR}/run")
    message(FATAL_ERROR "the run directory was created before the config error")
  endif()
elseif(MODE STREQUAL "sdp")
  run_checked(out 0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/single")
  run_checked(out 0 ${MPIRUN} "${DRIFTLESS}" train -c "${config}" -q
              --set "run.output_dir=${DIR}/sdp2" --set distributed.sequence_data_parallel=2)
  # |g - r| <= 1e-6 |r| for each pair; CMake's math() is integer only, so awk compares.
  function(expect_close what ref got)
    list(LENGTH ref n_ref)
    list(LENGTH got n_got)
    if(NOT n_ref EQUAL n_got OR n_ref EQUAL 0)
      message(FATAL_ERROR "${what}: ${n_ref} values single-process, ${n_got} under sdp2")
    endif()
    math(EXPR last "${n_ref} - 1")
    foreach(i RANGE ${last})
      list(GET ref ${i} r)
      list(GET got ${i} g)
      execute_process(COMMAND awk "BEGIN { d = ${g} - (${r}); if (d < 0) d = -d; r = ${r};
                                    if (r < 0) r = -r; exit !(d <= 1e-6 * r) }"
                      RESULT_VARIABLE far)
      if(far)
        message(FATAL_ERROR "${what} ${i}: sdp2 ${g} differs from single-process ${r}")
      endif()
      message("${what} ${i}: single ${r}, sdp2 ${g}")
    endforeach()
  endfunction()
  read_losses("${DIR}/single" ref)
  read_losses("${DIR}/sdp2" got)
  list(LENGTH ref n_ref)
  if(NOT n_ref EQUAL 3)
    message(FATAL_ERROR "expected 3 losses, got ${n_ref}: ${ref}")
  endif()
  expect_close("loss of step" "${ref}" "${got}")
  # The validation loss after the last step: whole sequences, each evaluated on one rank.
  read_losses("${DIR}/single" ref val_loss)
  read_losses("${DIR}/sdp2" got val_loss)
  expect_close("val_loss" "${ref}" "${got}")
elseif(MODE STREQUAL "resume")
  # With dropout, 4 steps straight (checkpoints after steps 1 and 3) against a run resumed
  # from the step-1 checkpoint: the losses of steps 2 and 3 and the validation loss after
  # step 3 are the same bits. Under MPIRUN with the LAYOUT overrides.
  set(run ${MPIRUN} "${DRIFTLESS}" train -c "${config}" -q --set model.dropout=0.1
      --set training.steps=4 --set training.eval_interval=4 --set training.checkpoint_interval=2)
  foreach(kv IN LISTS LAYOUT)
    list(APPEND run --set "${kv}")
  endforeach()
  run_checked(out 0 ${run} --set "run.output_dir=${DIR}/straight")
  file(COPY "${DIR}/straight/checkpoints/step_000001.safetensors"
       DESTINATION "${DIR}/resumed/checkpoints")
  run_checked(out 0 ${run} --set "run.output_dir=${DIR}/resumed" --resume)
  read_losses("${DIR}/straight" straight)
  read_losses("${DIR}/resumed" resumed)
  list(SUBLIST straight 2 2 want)
  if(NOT resumed STREQUAL want)
    message(FATAL_ERROR "losses of steps 2, 3 resumed from step 1: ${resumed}; straight: ${want}")
  endif()
  read_losses("${DIR}/straight" straight_val val_loss)
  read_losses("${DIR}/resumed" resumed_val val_loss)
  if(NOT resumed_val STREQUAL straight_val OR straight_val STREQUAL "")
    message(FATAL_ERROR "val_loss resumed ${resumed_val}, straight ${straight_val}")
  endif()
  # Dropout does change the loss, so the comparison above covers the masks.
  run_checked(out 0 ${run} --set "run.output_dir=${DIR}/no_dropout" --set model.dropout=0
              --set training.steps=1)
  read_losses("${DIR}/no_dropout" plain)
  list(GET straight 0 first)
  if(plain STREQUAL first)
    message(FATAL_ERROR "model.dropout 0.1 left the step-0 loss at ${plain}")
  endif()
  message("losses ${straight}, resumed ${resumed}, val_loss ${straight_val}; "
          "step 0 without dropout ${plain}")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
