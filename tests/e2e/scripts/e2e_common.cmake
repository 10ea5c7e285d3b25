# Helpers of the e2e check scripts (hf_check, plot_check, train_check; run with cmake -P):
# an empty scratch folder, the tiny random-data config they train, a command run with its
# exit status checked, and the losses of a run's metrics.jsonl.

# Each check starts from an empty DIR.
function(reset_dir dir)
  file(REMOVE_RECURSE "${dir}")
  file(MAKE_DIRECTORY "${dir}")
endfunction()

# write_tiny_config(<path> <training keys> [<more YAML lines>]): the tiny GPT-2 on random
# documents with a byte vocabulary (so `sample` needs no vocabulary files).
function(write_tiny_config path training)
  file(WRITE "${path}" "model: {vocab_size: 257, n_positions: 64, n_layer: 2, n_head: 4, n_embd: 32}
data: {format: random, tokenizer: bytes, random_documents: 100, random_mean_length: 20, random_max_length: 60}
batch: {sequence_length: 32, sequences: 4}
optimizer: {lr: 1.0e-2, warmup_steps: 1}
training: {${training}}
${ARGN}")
endfunction()

function(run_checked)  # run_checked(<out var> <expected status> <command...>): sets <out var>(_err)
  set(args ${ARGN})
  list(POP_FRONT args out_var want)
  execute_process(COMMAND ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 240)
  message("$ ${args}\n${out}${err}")
  if(NOT "${rc}" STREQUAL "${want}")
    message(FATAL_ERROR "exit status ${rc}, expected ${want}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${out_var}_err "${err}" PARENT_SCOPE)
endfunction()

# read_losses(<run dir> <out var> [<key>]): the values of `key` ("loss" unless given, or
# "val_loss") in metrics.jsonl, in order, as written (17 significant digits: equal text is
# equal bits).
function(read_losses run_dir out_var)
  set(key loss)
  if(ARGC GREATER 2)
    set(key "${ARGV2}")
  endif()
  file(STRINGS "${run_dir}/metrics.jsonl" lines)
  set(losses "")
  foreach(line IN LISTS lines)
    string(JSON loss ERROR_VARIABLE no_loss GET "${line}" ${key})
    if(NOT no_loss)
      list(APPEND losses "${loss}")
    endif()
  endforeach()
  set(${out_var} "${losses}" PARENT_SCOPE)
endfunction()
