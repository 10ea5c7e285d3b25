# Real clients of HuggingFace GPT-2 and Llama directories (label `hf`). Without transformers: a
# save_pretrained-style directory written by tests/reference/write_hf_fixture.py (plain
# Python) in each variant is imported, exported back and compared value for value; one is
# trained from (training.init_from) and sampled; a pytorch_model.bin-only one is refused. With
# transformers: tests/reference/check_hf_transformers.py (label `reference`; exit 77 = skip).
find_program(DL_PYTHON3 python3)
set(dl_hf_check ${CMAKE_CURRENT_LIST_DIR}/scripts/hf_check.cmake)
set(dl_hf_scratch ${PROJECT_BINARY_DIR}/scratch/e2e)

if(DL_PYTHON3)
  foreach(mode v4 v5 legacy sharded fp16 bin train)
    add_test(NAME e2e_hf_import_${mode}
             COMMAND ${CMAKE_COMMAND} -DMODE=${mode} -DDRIFTLESS=$<TARGET_FILE:driftless>
                     -DPYTHON=${DL_PYTHON3} -DSOURCE=${PROJECT_SOURCE_DIR}
                     -DDIR=${dl_hf_scratch}/hf_import_${mode} -P ${dl_hf_check})
    set_tests_properties(e2e_hf_import_${mode} PROPERTIES LABELS "e2e;hf" TIMEOUT 300)
  endforeach()
  # Llama (write_hf_llama_fixture.py): tied MHA, untied GQA, shards, bf16 with transformers 4
  # keys; training from an import; refusals.
  foreach(mode tied untied sharded bf16 train refuse)
    add_test(NAME e2e_hf_llama_${mode}
             COMMAND ${CMAKE_COMMAND} -DMODE=${mode} -DDRIFTLESS=$<TARGET_FILE:driftless>
                     -DPYTHON=${DL_PYTHON3} -DSOURCE=${PROJECT_SOURCE_DIR}
                     -DDIR=${dl_hf_scratch}/hf_llama_${mode}
                     -P ${CMAKE_CURRENT_LIST_DIR}/scripts/hf_llama_check.cmake)
    set_tests_properties(e2e_hf_llama_${mode} PROPERTIES LABELS "e2e;hf" TIMEOUT 300)
  endforeach()
else()
  message(STATUS "python3 not found: the e2e_hf_import_* tests are not registered")
endif()

# python3 from PATH at test time (the one that has torch and transformers, if any).
add_test(NAME hf_transformers
         COMMAND /usr/bin/env python3 ${PROJECT_SOURCE_DIR}/tests/reference/check_hf_transformers.py
                 --driftless $<TARGET_FILE:driftless> --work ${dl_hf_scratch}/hf_transformers)
set_tests_properties(hf_transformers PROPERTIES LABELS "reference;e2e;hf" SKIP_RETURN_CODE 77
                     TIMEOUT 600)
add_test(NAME hf_llama_transformers
         COMMAND /usr/bin/env python3 ${PROJECT_SOURCE_DIR}/tests/reference/check_hf_llama.py
                 --driftless $<TARGET_FILE:driftless> --work ${dl_hf_scratch}/hf_llama_transformers)
set_tests_properties(hf_llama_transformers PROPERTIES LABELS "reference;e2e;hf"
                     SKIP_RETURN_CODE 77 TIMEOUT 600)
