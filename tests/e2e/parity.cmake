# The drift report against PyTorch (label e2e): driftless trains the tiny case of
# tests/reference/parity_tiny.yaml on the CPU and `driftless report` compares it with PyTorch's
# float64 run of the same weights and batches (tests/reference/golden/parity_tiny): every
# tensor within 1e-5; with the planted fault decay_norm_gains (AdamW decays the layer-norm
# gains) the report fails and names the first tensor the fault touches, h.0.ln_1's gain after
# step 0's update. Also `driftless batch --export` and `driftless plot --difference`. The
# checks live in scripts/parity_check.cmake.
add_test(NAME e2e_parity_report
         COMMAND ${CMAKE_COMMAND} -DDRIFTLESS=$<TARGET_FILE:driftless>
                 -DDIR=${PROJECT_BINARY_DIR}/scratch/e2e/parity -DROOT=${PROJECT_SOURCE_DIR}
                 -P ${CMAKE_CURRENT_LIST_DIR}/scripts/parity_check.cmake)
set_tests_properties(e2e_parity_report PROPERTIES LABELS "e2e;reference" TIMEOUT 300)
# The parity run's verdict (tests/reference/parity_compare.py) on made-up curves.
add_test(NAME reference_parity_compare
         COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/reference/parity_compare_test.py)
set_tests_properties(reference_parity_compare PROPERTIES LABELS reference TIMEOUT 60)
# The recorded fp32 band (tests/reference/parity_band.py): fingerprint, record, check, refusals.
add_test(NAME reference_parity_band
         COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/reference/parity_band_test.py)
set_tests_properties(reference_parity_band PROPERTIES LABELS reference TIMEOUT 60)
# The layouts part's verdict (tests/reference/parity_layouts.py) on made-up curves.
add_test(NAME reference_parity_layouts
         COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/reference/parity_layouts_test.py)
set_tests_properties(reference_parity_layouts PROPERTIES LABELS reference TIMEOUT 60)
