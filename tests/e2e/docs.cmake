# The documentation against the code (label `docs`): every relative link of README.md,
# ARCHITECTURE.md, CONTRIBUTING.md and docs/*.md resolves inside the repository (anchors
# included), every `driftless <command>` in their shell blocks and inline code exists
# (`--help` exits 0 with its own usage), README.md stays within 200 lines and shows
# `make demo` and `make test`, and docs/configs.md's config reference is what
# `driftless config --reference` prints. The checks: scripts/check_docs.py.
add_test(NAME docs_readme
         COMMAND /usr/bin/env python3 ${CMAKE_CURRENT_LIST_DIR}/scripts/check_docs.py
                 ${PROJECT_SOURCE_DIR} $<TARGET_FILE:driftless>)
set_tests_properties(docs_readme PROPERTIES LABELS docs TIMEOUT 120)
# `make test` installs the Debian packages once: with the build folder's stamp present it
# goes straight to configure and build (make -n: what it would run).
add_test(NAME make_test_skips_installed_deps
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/scripts/make_deps_check.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(make_test_skips_installed_deps PROPERTIES LABELS docs TIMEOUT 60)
# Every environment variable is read through engine/core/env.h (scripts/check_getenv.py).
add_test(NAME one_place_reads_the_environment
         COMMAND /usr/bin/env python3 ${CMAKE_CURRENT_LIST_DIR}/scripts/check_getenv.py
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(one_place_reads_the_environment PROPERTIES LABELS docs TIMEOUT 60)
