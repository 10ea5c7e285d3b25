# `driftless train` and `driftless sample` as a user runs them (label `e2e`): a 3-step run on a
# random config under the build's scratch folder (then sampling from its checkpoint), a config
# with an unknown key (exit status 1, the key's path on stderr), an SDP run under
# `mpirun -np 2` whose per-step and validation losses equal the single-process run's to 1e-6
# relative, and runs with dropout under `mpirun -np 2` (sdp2; dp2 with ZeRO-1) resumed from a
# checkpoint bit for bit. The checks live in scripts/train_check.cmake (outside this folder's
# *.cmake glob).
set(dl_train_check ${CMAKE_CURRENT_LIST_DIR}/scripts/train_check.cmake)
set(dl_train_scratch ${PROJECT_BINARY_DIR}/scratch/e2e)

foreach(mode run unknown_key)
  add_test(NAME e2e_train_${mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${mode} -DDRIFTLESS=$<TARGET_FILE:driftless>
                   -DDIR=${dl_train_scratch}/train_${mode} -P ${dl_train_check})
  set_tests_properties(e2e_train_${mode} PROPERTIES LABELS e2e TIMEOUT 300)
endforeach()

add_test(NAME e2e_train_sdp_np2
         COMMAND ${CMAKE_COMMAND} -DMODE=sdp -DDRIFTLESS=$<TARGET_FILE:driftless>
                 -DDIR=${dl_train_scratch}/train_sdp
                 "-DMPIRUN=${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;-np;2"
                 -P ${dl_train_check})
# Containers often forbid the cross-memory-attach shared-memory copy; plain copies work.
set_tests_properties(e2e_train_sdp_np2 PROPERTIES LABELS "e2e;mpi" TIMEOUT 300
                     ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")

foreach(layout sdp2 dp2_zero1)
  if(layout STREQUAL "sdp2")
    set(dl_layout "distributed.sequence_data_parallel=2")
  else()
    set(dl_layout "distributed.data_parallel=2;distributed.zero_stage=1")
  endif()
  add_test(NAME e2e_train_resume_dropout_${layout}
           COMMAND ${CMAKE_COMMAND} -DMODE=resume -DDRIFTLESS=$<TARGET_FILE:driftless>
                   -DDIR=${dl_train_scratch}/train_resume_${layout}
                   "-DMPIRUN=${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;-np;2"
                   "-DLAYOUT=${dl_layout}" -P ${dl_train_check})
  set_tests_properties(e2e_train_resume_dropout_${layout} PROPERTIES LABELS "e2e;mpi" TIMEOUT 300
                       ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
endforeach()
# `driftless batch` takes the run config and --set as train does (scripts/batch_check.py).
add_test(NAME e2e_batch_from_config
         COMMAND /usr/bin/env python3 ${CMAKE_CURRENT_LIST_DIR}/scripts/batch_check.py
                 $<TARGET_FILE:driftless> ${PROJECT_SOURCE_DIR})
set_tests_properties(e2e_batch_from_config PROPERTIES LABELS e2e TIMEOUT 120)
