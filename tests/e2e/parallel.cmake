# parallel/ through mpirun (label `mpi`): tests/parallel/mpi_driver.cpp is its own program,
# test_parallel_mpi, run on 2 and 4 ranks, plus fault tests that must end the job non-zero
# with the failing rank's message (each under a CTest timeout, so a hang fails, not blocks).
# The driver has its own main(), so it is taken out of the globbed gtest binary test_parallel.
get_target_property(dl_parallel_test_sources test_parallel SOURCES)
list(FILTER dl_parallel_test_sources EXCLUDE REGEX "tests/parallel/mpi_driver\\.cpp$")
set_target_properties(test_parallel PROPERTIES SOURCES "${dl_parallel_test_sources}")

add_executable(test_parallel_mpi ${CMAKE_CURRENT_LIST_DIR}/../parallel/mpi_driver.cpp)
target_link_libraries(test_parallel_mpi PRIVATE driftless_parallel)

# Containers often forbid the cross-memory-attach shared-memory copy; plain copies work.
set(dl_mpi_env "OMPI_MCA_btl_vader_single_copy_mechanism=none")
set(dl_mpirun ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe)

foreach(np 2 4)
  add_test(NAME parallel_mpi_np${np}
           COMMAND ${dl_mpirun} -np ${np} $<TARGET_FILE:test_parallel_mpi>)
  set_tests_properties(parallel_mpi_np${np} PROPERTIES LABELS mpi TIMEOUT 120
                       ENVIRONMENT "${dl_mpi_env}")
endforeach()

# fault name, expected message (a regex over the job's output)
set(dl_fault_throw "rank 1: \\[planted\\] fault thrown on rank 1 on purpose")
set(dl_fault_hang "rank 0: \\[all_reduce\\] collective all_reduce timed out after 1 s on rank 0")
# MPI has no stream-ordered collectives: the first all-gather itself times out.
set(dl_fault_hang_ordered
    "rank 0: \\[all_gather_into\\] collective all_gather_into timed out after 1 s on rank 0")
foreach(fault throw hang hang_ordered)
  add_test(NAME parallel_mpi_fault_${fault}
           COMMAND ${CMAKE_COMMAND}
             "-DCOMMAND=${dl_mpirun};-np;2;$<TARGET_FILE:test_parallel_mpi>;--fault;${fault}"
             "-DEXPECT=${dl_fault_${fault}}"
             -P ${CMAKE_CURRENT_LIST_DIR}/../parallel/expect_job_failure.cmake)
  set_tests_properties(parallel_mpi_fault_${fault} PROPERTIES LABELS mpi TIMEOUT 60
                       ENVIRONMENT "${dl_mpi_env}")
endforeach()

# The same checks through NCCL on cuda tensors (one GPU per rank); skipped (exit 77) when the
# machine has fewer GPUs than ranks.
if(DRIFTLESS_HAVE_CUDA)
  add_test(NAME parallel_nccl_np2
           COMMAND ${dl_mpirun} -np 2 $<TARGET_FILE:test_parallel_mpi> --device cuda)
  set_tests_properties(parallel_nccl_np2 PROPERTIES LABELS "mpi;gpu" TIMEOUT 180
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${dl_mpi_env}")
  # A stream-ordered NCCL all-gather a peer never joins is reported by the next one.
  add_test(NAME parallel_nccl_fault_hang_ordered
           COMMAND ${CMAKE_COMMAND}
             "-DCOMMAND=${dl_mpirun};-np;2;$<TARGET_FILE:test_parallel_mpi>;--device;cuda;--fault;hang_ordered"
             "-DEXPECT=rank 0: \\[all_gather_in_place_ordered\\] collective all_gather_in_place_ordered timed out after 1 s on rank 0"
             -P ${CMAKE_CURRENT_LIST_DIR}/../parallel/expect_job_failure.cmake)
  set_tests_properties(parallel_nccl_fault_hang_ordered PROPERTIES LABELS "mpi;gpu" TIMEOUT 60
                       SKIP_REGULAR_EXPRESSION "skipped, [0-9]+ GPUs for"
                       ENVIRONMENT "${dl_mpi_env}")
endif()
