# `make demo` in short: scripts/demo.sh with 20 training steps and 3 regression layouts (under
# mpirun -np 2 where there are 2 cores), checked for what each of its three jobs prints.
add_test(NAME demo_smoke
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/scripts/demo_smoke.sh ${PROJECT_SOURCE_DIR}
                 ${PROJECT_BINARY_DIR})
set_tests_properties(demo_smoke PROPERTIES LABELS "docs;e2e;mpi" TIMEOUT 600
                     FIXTURES_SETUP demo_run ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
# The demo's drift report (the planted fault) renders in headless Chromium; its screenshot is
# the picture of README.md (docs/drift-report.png is a copy of scratch/demo/fault/report.png).
add_test(NAME demo_report_screenshot
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/scripts/screenshot_report.sh
                 ${PROJECT_BINARY_DIR}/scratch/demo/fault/report.html
                 ${PROJECT_BINARY_DIR}/scratch/demo/fault/report.png 1100,1620)
set_tests_properties(demo_report_screenshot PROPERTIES LABELS "docs;e2e" TIMEOUT 180
                     FIXTURES_REQUIRED demo_run SKIP_RETURN_CODE 77)
