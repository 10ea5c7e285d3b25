# What a run guarantees (docs/guarantees.md), as a user meets it (label `e2e`): SIGTERM to a
# run, SIGINT to one rank of two and SIGTERM to mpirun each end the job with one checkpoint
# at the step the message names; a second run into a running job's directory is refused;
# ranks started with different configs refuse before step 0, naming the key. The signal
# checks live in scripts/signal_check.sh, the others in scripts/guarantees_check.cmake.
set(dl_guard_scratch ${PROJECT_BINARY_DIR}/scratch/e2e)
set(dl_guard_mpirun ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe)
set(dl_guard_env "OMPI_MCA_btl_vader_single_copy_mechanism=none")

add_test(NAME e2e_guard_sigterm
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/scripts/signal_check.sh single_sigterm
                 $<TARGET_FILE:driftless> ${dl_guard_scratch}/guard_sigterm)
set_tests_properties(e2e_guard_sigterm PROPERTIES LABELS e2e TIMEOUT 180)

foreach(mode mpi_sigint_rank mpi_sigterm_mpirun)
  add_test(NAME e2e_guard_${mode}_np2
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/scripts/signal_check.sh ${mode}
                   $<TARGET_FILE:driftless> ${dl_guard_scratch}/guard_${mode} ${dl_guard_mpirun})
  set_tests_properties(e2e_guard_${mode}_np2 PROPERTIES LABELS "e2e;mpi" TIMEOUT 180
                       ENVIRONMENT "${dl_guard_env}")
endforeach()

foreach(mode ranks_disagree output_dir)
  add_test(NAME e2e_guard_${mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${mode} -DDRIFTLESS=$<TARGET_FILE:driftless>
                   -DDIR=${dl_guard_scratch}/guard_${mode} "-DMPIRUN=${dl_guard_mpirun}"
                   -P ${CMAKE_CURRENT_LIST_DIR}/scripts/guarantees_check.cmake)
  set_tests_properties(e2e_guard_${mode} PROPERTIES LABELS "e2e;mpi" TIMEOUT 120
                       ENVIRONMENT "${dl_guard_env}")
  if(mode STREQUAL "output_dir")
    set_tests_properties(e2e_guard_${mode} PROPERTIES LABELS e2e)
  endif()
endforeach()
