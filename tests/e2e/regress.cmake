# `driftless regress` end to end (label e2e): every layout of configs/regress/tiny.yaml
# (single-process and mpirun -np 2) against `simple` at rms_rel <= 1e-5 in fp32, and the
# planted faults fail with the first failing tensor in the attention where they were put.
add_test(NAME regress_tiny
         COMMAND driftless regress -c ${PROJECT_SOURCE_DIR}/configs/regress/tiny.yaml
                 -o ${PROJECT_BINARY_DIR}/e2e/regress_tiny)
set_tests_properties(regress_tiny PROPERTIES LABELS "e2e;mpi" TIMEOUT 900
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none"
                     FIXTURES_SETUP regress_report)
# The HTML report renders in headless Chromium (Debian `chromium`) to a non-blank screenshot.
add_test(NAME regress_report_screenshot
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/scripts/screenshot_report.sh
                 ${PROJECT_BINARY_DIR}/e2e/regress_tiny/report.html
                 ${PROJECT_BINARY_DIR}/e2e/regress_tiny/report.png)
set_tests_properties(regress_report_screenshot PROPERTIES LABELS e2e TIMEOUT 180
                     FIXTURES_REQUIRED regress_report SKIP_RETURN_CODE 77)
add_test(NAME regress_faults
         COMMAND ${CMAKE_COMMAND} -DDRIFTLESS=$<TARGET_FILE:driftless>
                 -DCONFIG=${CMAKE_CURRENT_LIST_DIR}/regress/faults.yaml
                 -DOUT=${PROJECT_BINARY_DIR}/e2e/regress_faults
                 -P ${CMAKE_CURRENT_LIST_DIR}/regress/check_faults.cmake)
set_tests_properties(regress_faults PROPERTIES LABELS "e2e;mpi" TIMEOUT 600
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
# Context parallelism on 4 ranks: ring and a2a layouts of tiny_np4.yaml against
# their single-process runs (a few seconds; the 2-rank ones run in regress_tiny).
add_test(NAME regress_cp_np4
         COMMAND driftless regress -c ${PROJECT_SOURCE_DIR}/configs/regress/tiny_np4.yaml
                 --only cp4_ring --only cp4_ring_ms2 --only cp2_ring_dp2 --only simple_kv4
                 --only cp4_a2a --only cp4_a2a_ms2 --only cp4_ring_ms2_rc_full
                 --only cp4_a2a_ms2_rc_full -o ${PROJECT_BINARY_DIR}/e2e/regress_cp_np4)
set_tests_properties(regress_cp_np4 PROPERTIES LABELS "e2e;mpi" TIMEOUT 600
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
# Dropout on: masks follow each token's place in the global batch, so micro-sequence, SDP,
# data-parallel and context-parallel layouts match `simple` (tests/e2e/regress/dropout.yaml).
add_test(NAME regress_dropout
         COMMAND driftless regress -c ${CMAKE_CURRENT_LIST_DIR}/regress/dropout.yaml
                 -o ${PROJECT_BINARY_DIR}/e2e/regress_dropout)
set_tests_properties(regress_dropout PROPERTIES LABELS "e2e;mpi" TIMEOUT 600
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
# User score and mask expressions (docs/score-expressions.md) on micro-sequences, SDP, a2a, the
# ring and the hybrid (2 and 4 ranks).
add_test(NAME regress_tiny_expr
         COMMAND driftless regress -c ${PROJECT_SOURCE_DIR}/configs/regress/tiny_expr.yaml
                 -o ${PROJECT_BINARY_DIR}/e2e/regress_tiny_expr)
set_tests_properties(regress_tiny_expr PROPERTIES LABELS "e2e;mpi" TIMEOUT 600
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
# Llama (rotary positions, RMSNorm, SwiGLU, GQA): the layouts of configs/regress/tiny_llama.yaml
# on 1, 2 and 4 ranks, and a planted off-by-one of the rotary positions at micro-sequence,
# SDP and context-parallel boundaries that must fail at layer 0's rotary output.
add_test(NAME regress_tiny_llama
         COMMAND driftless regress -c ${PROJECT_SOURCE_DIR}/configs/regress/tiny_llama.yaml
                 -o ${PROJECT_BINARY_DIR}/e2e/regress_tiny_llama)
set_tests_properties(regress_tiny_llama PROPERTIES LABELS "e2e;mpi" TIMEOUT 900
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
add_test(NAME regress_faults_llama
         COMMAND ${CMAKE_COMMAND} -DDRIFTLESS=$<TARGET_FILE:driftless>
                 -DCONFIG=${CMAKE_CURRENT_LIST_DIR}/regress/faults_llama.yaml
                 -DOUT=${PROJECT_BINARY_DIR}/e2e/regress_faults_llama
                 "-DEXPECT=fault_positions_ms4=layers.0.self_attn.rope;fault_positions_sdp2=layers.0.self_attn.rope;fault_positions_cp2_a2a=layers.0.self_attn.rope"
                 -DCOUNT=3 -P ${CMAKE_CURRENT_LIST_DIR}/regress/check_faults.cmake)
set_tests_properties(regress_faults_llama PROPERTIES LABELS "e2e;mpi" TIMEOUT 600
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
