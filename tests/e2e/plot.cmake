# `driftless plot` end to end (label e2e): a 4-step tiny run with validation every 2 steps is
# plotted to RUN/loss.html (one polyline each for loss, val_loss and tokens/s), two runs are
# overlaid into an SVG, bad input fails with the file and line; the page renders in headless
# Chromium to a non-blank screenshot. The checks live in scripts/plot_check.cmake.
set(dl_plot_dir ${PROJECT_BINARY_DIR}/scratch/e2e/plot)
add_test(NAME e2e_plot
         COMMAND ${CMAKE_COMMAND} -DDRIFTLESS=$<TARGET_FILE:driftless> -DDIR=${dl_plot_dir}
                 -P ${CMAKE_CURRENT_LIST_DIR}/scripts/plot_check.cmake)
set_tests_properties(e2e_plot PROPERTIES LABELS e2e TIMEOUT 300 FIXTURES_SETUP plot_page)
add_test(NAME e2e_plot_screenshot
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/scripts/screenshot_report.sh
                 ${dl_plot_dir}/a/loss.html ${dl_plot_dir}/a/loss.png)
set_tests_properties(e2e_plot_screenshot PROPERTIES LABELS e2e TIMEOUT 180
                     FIXTURES_REQUIRED plot_page SKIP_RETURN_CODE 77)
