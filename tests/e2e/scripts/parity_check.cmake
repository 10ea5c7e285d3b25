# cmake -DDRIFTLESS=<binary> -DDIR=<scratch> -DROOT=<source dir> -P parity_check.cmake
# The checks behind tests/e2e/parity.cmake. Starts from an empty DIR.
include(${CMAKE_CURRENT_LIST_DIR}/e2e_common.cmake)
reset_dir("${DIR}")
set(config "${ROOT}/tests/reference/parity_tiny.yaml")
set(golden "${ROOT}/tests/reference/golden/parity_tiny")
set(tol --tolerance 1e-5 1e-5 1e-5 1e-5)

# driftless against PyTorch's float64 run: every tensor of steps 0 and 2 and every loss pass.
run_checked(out 0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/ok")
run_checked(out 0 "${DRIFTLESS}" report "${golden}" "${DIR}/ok" ${tol} -o "${DIR}/report_ok")
if(NOT out MATCHES "all layouts match their baseline")
  message(FATAL_ERROR "the report against PyTorch did not pass")
endif()
file(READ "${DIR}/report_ok/report.json" report)
string(JSON n LENGTH "${report}" layouts 0 tensors)
if(n LESS 100)  # 2 steps x (forward, backward, parameter gradients, parameters) + losses
  message(FATAL_ERROR "only ${n} tensors compared")
endif()

# The planted fault: weight decay on the norm gains. Forward, backward and gradients of step 0
# still agree; the first failure is the first gain after step 0's update.
set(ENV{DRIFTLESS_TEST_FAULT} decay_norm_gains)
run_checked(out 0 "${DRIFTLESS}" train -c "${config}" -q --set "run.output_dir=${DIR}/fault")
unset(ENV{DRIFTLESS_TEST_FAULT})
run_checked(out 1 "${DRIFTLESS}" report "${golden}" "${DIR}/fault" ${tol} -o "${DIR}/report_fault")
file(READ "${DIR}/report_fault/report.json" report)
string(JSON first GET "${report}" layouts 0 first_failure name)
string(JSON step GET "${report}" layouts 0 first_failure step)
if(NOT first STREQUAL "param/h.0.ln_1.weight@param" OR NOT step EQUAL 0)
  message(FATAL_ERROR "the fault's first tensor is ${first} at step ${step}, expected "
                      "param/h.0.ln_1.weight@param at step 0")
endif()
if(NOT out MATCHES "param/h.0.ln_1.weight@param")
  message(FATAL_ERROR "the report's table does not name param/h.0.ln_1.weight@param")
endif()

# --band: PyTorch's own float64 run as the band of itself is zero, so the class tolerances stay.
run_checked(out 0 "${DRIFTLESS}" report "${golden}" "${DIR}/ok" ${tol} --band "${golden}"
            -o "${DIR}/report_band")

# The exported batches are the ones the golden run trained on: its step-0 loss is driftless's.
run_checked(out 0 "${DRIFTLESS}" batch --config "${config}" --export "${DIR}/batches.safetensors"
            --steps 3 --validation-batches 1)
file(SIZE "${DIR}/batches.safetensors" size)
if(size LESS 1536)  # 2 x 3 x 2 x 32 int32 tokens and labels, at least
  message(FATAL_ERROR "batches.safetensors holds ${size} bytes")
endif()
read_losses("${DIR}/ok" dl_losses)
read_losses("${golden}" torch_losses)
list(GET dl_losses 0 a)
list(GET torch_losses 0 b)
# cmake has no float arithmetic: the leading digits as text
string(SUBSTRING "${a}" 0 6 a6)
string(SUBSTRING "${b}" 0 6 b6)
if(NOT a6 STREQUAL b6)
  message(FATAL_ERROR "step-0 loss: driftless ${a}, PyTorch ${b}")
endif()

# The two curves with their difference.
run_checked(out 0 "${DRIFTLESS}" plot "${golden}" "${DIR}/ok" --difference -o "${DIR}/diff.svg")
file(READ "${DIR}/diff.svg" svg)
string(REGEX MATCHALL "data-series='loss_difference'" d "${svg}")
string(REGEX MATCHALL "data-series='val_loss_difference'" v "${svg}")
list(LENGTH d nd)
list(LENGTH v nv)
if(NOT nd EQUAL 1 OR NOT nv EQUAL 1)
  message(FATAL_ERROR "difference chart: ${nd} loss and ${nv} validation lines, expected 1 each")
endif()
run_checked(out 1 "${DRIFTLESS}" plot "${DIR}/ok" --difference -o "${DIR}/one.svg")
