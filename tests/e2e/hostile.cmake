# Hostile and careless inputs met through the command line (label `e2e`, docs/guarantees.md
# "Hostile and careless files"): FIFOs named as checkpoints or shards, a symbolic-link lock,
# --overwrite through a linked run directory, deep or wrapping safetensors headers, and
# config keys given twice or out of reach. Each case is a function of
# scripts/hostile_check.sh; every refusal must exit 1 within 60 s under an 8 GB address limit.
set(dl_hostile_scratch ${PROJECT_BINARY_DIR}/scratch/e2e)
foreach(case resume_fifo lock_symlink overwrite_foreign safetensors_nesting hf_fifo config_keys)
  add_test(NAME e2e_hostile_${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/scripts/hostile_check.sh ${case}
                   $<TARGET_FILE:driftless> ${dl_hostile_scratch}/hostile_${case})
  set_tests_properties(e2e_hostile_${case} PROPERTIES LABELS e2e TIMEOUT 300)
endforeach()
