# cmake -DMODE=ranks_disagree|output_dir -DDRIFTLESS=<binary> -DDIR=<scratch> -DMPIRUN=<list>
#   -P guarantees_check.cmake
# The checks behind tests/e2e/guarantees.cmake that need no signals; each starts from an
# empty DIR.
include(${CMAKE_CURRENT_LIST_DIR}/e2e_common.cmake)
reset_dir("${DIR}")
set(config "${DIR}/config.yaml")
write_tiny_config("${config}" "steps: 3, eval_interval: 0, seed: 11"
                  "run: {output_dir: ${DIR}/run}\n")

if(MODE STREQUAL "ranks_disagree")
  # Two ranks of one job (mpirun's MPMD form), each with its own --set.
  foreach(key_values "model.n_layer;2;3" "optimizer.lr;0.01;0.02" "training.seed;11;12")
    list(GET key_values 0 key)
    list(GET key_values 1 a)
    list(GET key_values 2 b)
    run_checked(out 1 ${MPIRUN} -np 1 "${DRIFTLESS}" train -c "${config}" -q
                --set distributed.data_parallel=2 --set ${key}=${a} :
                -np 1 "${DRIFTLESS}" train -c "${config}" -q
                --set distributed.data_parallel=2 --set ${key}=${b})
    string(REPLACE "." "\\." key_re "${key}")
    string(REPLACE "." "\\." b_re "${b}")
    if(NOT "${out}${out_err}" MATCHES
       "ranks disagree on the configuration: ${key_re} is [0-9.e-]+ on rank 0 but ${b_re} on rank 1")
      message(FATAL_ERROR "the refusal does not name ${key}")
    endif()
    if(EXISTS "${DIR}/run/metrics.jsonl")
      message(FATAL_ERROR "a step ran before the ranks agreed")
    endif()
  endforeach()
elseif(MODE STREQUAL "output_dir")
  # A run directory that cannot be created: exit 1 with the path and the reason.
  file(WRITE "${DIR}/a_file" "x")
  run_checked(out 1 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/a_file/run")
  if(NOT "${out_err}" MATCHES "cannot create the run directory ${DIR}/a_file/run")
    message(FATAL_ERROR "the error does not name the run directory")
  endif()
  # NaN in a float key is refused with its own reason.
  run_checked(out 1 "${DRIFTLESS}" train -c "${config}" -q --set optimizer.grad_clip=.nan)
  if(NOT "${out_err}" MATCHES "optimizer.grad_clip: expected a number, got NaN")
    message(FATAL_ERROR "NaN grad_clip is not refused by name")
  endif()
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
