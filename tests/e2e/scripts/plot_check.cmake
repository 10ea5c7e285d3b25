# cmake -DDRIFTLESS=<binary> -DDIR=<scratch> -P plot_check.cmake
# The checks behind tests/e2e/plot.cmake: train two tiny runs, plot one and both, and check
# the polylines of the written files and the errors on bad input. Starts from an empty DIR.
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")

set(config "${DIR}/config.yaml")
file(WRITE "${config}" "model: {vocab_size: 257, n_positions: 64, n_layer: 2, n_head: 4, n_embd: 32}
data: {format: random, tokenizer: bytes, random_documents: 100, random_mean_length: 20, random_max_length: 60}
batch: {sequence_length: 32, sequences: 4}
optimizer: {lr: 1.0e-2, warmup_steps: 1}
training: {steps: 4, eval_interval: 2, eval_batches: 1, seed: 11}
")

function(run_checked want)  # run_checked(<expected status> <command...>): sets out, err
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e
                  TIMEOUT 240)
  message("$ ${ARGN}\n${o}${e}")
  if(NOT "${rc}" STREQUAL "${want}")
    message(FATAL_ERROR "exit status ${rc}, expected ${want}")
  endif()
  set(out "${o}" PARENT_SCOPE)
  set(err "${e}" PARENT_SCOPE)
endfunction()

# expect_polylines(<file> <run> <series> <how many> <points each>)
function(expect_polylines file run series want points)
  file(READ "${file}" text)
  string(REGEX MATCHALL "<polyline data-run='${run}' data-series='${series}'[^>]* points='[^']*'"
         found "${text}")
  list(LENGTH found n)
  if(NOT n EQUAL want)
    message(FATAL_ERROR "${file}: ${n} polylines of ${run}/${series}, expected ${want}")
  endif()
  foreach(line IN LISTS found)
    string(REGEX REPLACE ".* points='([^']*)'" "\\1" pts "${line}")
    string(REGEX MATCHALL "[-0-9.]+,[-0-9.]+" pairs "${pts}")
    list(LENGTH pairs np)
    if(NOT np EQUAL points)
      message(FATAL_ERROR "${file}: ${run}/${series} has ${np} points, expected ${points}")
    endif()
  endforeach()
endfunction()

run_checked(0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/a")
run_checked(0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/b"
            --set optimizer.lr=3.0e-3)

# One run: RUN/loss.html with 4 train losses, 2 validation losses, 4 tokens/s values.
run_checked(0 "${DRIFTLESS}" plot "${DIR}/a")
if(NOT out MATCHES "plot: ${DIR}/a/loss.html")
  message(FATAL_ERROR "plot did not report writing ${DIR}/a/loss.html")
endif()
expect_polylines("${DIR}/a/loss.html" a loss 1 4)
expect_polylines("${DIR}/a/loss.html" a val_loss 1 2)
expect_polylines("${DIR}/a/loss.html" a tokens_per_second 1 4)
file(READ "${DIR}/a/loss.html" page)
if(NOT page MATCHES "^<!DOCTYPE html>" OR NOT page MATCHES "</html>\n$" OR page MATCHES "<script")
  message(FATAL_ERROR "${DIR}/a/loss.html is not a self-contained HTML page")
endif()

# Two runs overlaid: default plot.html beside them, and an SVG with -o and --title.
run_checked(0 "${DRIFTLESS}" plot "${DIR}/a" "${DIR}/b/")
foreach(r a b)
  expect_polylines("${DIR}/plot.html" ${r} loss 1 4)
  expect_polylines("${DIR}/plot.html" ${r} val_loss 1 2)
endforeach()
run_checked(0 "${DRIFTLESS}" plot "${DIR}/a" "${DIR}/b" -o "${DIR}/out/curves.svg" --title "lr sweep")
file(READ "${DIR}/out/curves.svg" svg)
if(NOT svg MATCHES "^<\\?xml" OR NOT svg MATCHES ">lr sweep</text>")
  message(FATAL_ERROR "${DIR}/out/curves.svg is not the titled SVG")
endif()
foreach(r a b)
  expect_polylines("${DIR}/out/curves.svg" ${r} tokens_per_second 1 4)
endforeach()

# Errors: one line naming the problem, exit status 1.
file(MAKE_DIRECTORY "${DIR}/empty")
run_checked(1 "${DRIFTLESS}" plot "${DIR}/a" "${DIR}/empty")
if(NOT err MATCHES "driftless: error: \\[plot\\] .*empty: no metrics.jsonl")
  message(FATAL_ERROR "no clear error for a directory without metrics.jsonl")
endif()
file(MAKE_DIRECTORY "${DIR}/bad")
file(WRITE "${DIR}/bad/metrics.jsonl" "{\"step\":0,\"loss\":5}\n{\"step\":1,\"loss\":\n")
run_checked(1 "${DRIFTLESS}" plot "${DIR}/bad")
if(NOT err MATCHES "bad/metrics.jsonl:2: expected a JSON object")
  message(FATAL_ERROR "the malformed line is not named by file and line number")
endif()
run_checked(1 "${DRIFTLESS}" plot "${DIR}/a" -o "${DIR}/a/plot.png")
if(NOT err MATCHES "ending in .html or .svg")
  message(FATAL_ERROR "no clear error for an output that is neither .html nor .svg")
endif()
