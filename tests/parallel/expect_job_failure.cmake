# cmake -DCOMMAND=<list> -DEXPECT=<regex> -P expect_job_failure.cmake: passes when COMMAND
# exits non-zero and its output (stdout + stderr) matches EXPECT. Used by the MPI fault tests.
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 50)
message("${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected the job to fail, but it exited 0")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "job failed (${rc}) but its output does not match '${EXPECT}'")
endif()
message("job failed as expected (${rc})")
