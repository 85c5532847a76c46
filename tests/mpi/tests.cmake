# MPI suites: every tests/mpi/test_mpi_*.c runs under mpirun with 2, 3 and 4 ranks (oversubscribed on small
# machines), OMP_NUM_THREADS=1 per rank. Registered only with ATTN_MPI_TESTS (make test-mpi), label mpi.
# A deadlock (one rank returning while the others wait in a collective) must fail, not hang CI: each run is
# wrapped in `timeout` (TERM to mpirun, which takes its ranks down, then KILL) when it is installed, and
# ctest's own TIMEOUT is the backstop.
if(TARGET attn_mpi AND ATTN_MPI_TESTS)
  find_program(ATTN_MPIRUN NAMES mpirun mpiexec REQUIRED)
  find_program(ATTN_TIMEOUT NAMES timeout)
  set(ATTN_MPI_NPS 2 3 4)
  # seconds per mpirun: the suites take seconds each on an idle machine; test_mpi_collective, whose cases used
  # to deadlock, gets a tighter limit so such a regression is reported quickly
  set(ATTN_MPI_LIMIT 180)
  set(ATTN_MPI_COLLECTIVE_LIMIT 60)
  macro(attn_mpi_wrap limit)
    if(ATTN_TIMEOUT)
      set(ATTN_MPI_WRAP ${ATTN_TIMEOUT} -k 10 ${limit})
    else()
      set(ATTN_MPI_WRAP)
    endif()
    math(EXPR ATTN_MPI_CTEST_LIMIT "${limit} + 30")
  endmacro()
  attn_mpi_wrap(${ATTN_MPI_LIMIT})
  set(ATTN_MPIRUN_FLAGS --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1)
  add_custom_target(attn_mpi_check)
  file(GLOB _mpi_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_mpi_*.c)
  foreach(src IN LISTS _mpi_tests)
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_compile_options(${name} PRIVATE ${ATTN_WARNINGS})
    target_link_libraries(${name} PRIVATE attn_mpi m)
    add_dependencies(attn_mpi_check ${name})
    if(name STREQUAL "test_mpi_collective")
      attn_mpi_wrap(${ATTN_MPI_COLLECTIVE_LIMIT})
    else()
      attn_mpi_wrap(${ATTN_MPI_LIMIT})
    endif()
    foreach(np IN LISTS ATTN_MPI_NPS)
      add_test(NAME mpi.${name}.np${np}
        COMMAND ${ATTN_MPI_WRAP} ${ATTN_MPIRUN} ${ATTN_MPIRUN_FLAGS} -np ${np} $<TARGET_FILE:${name}>)
      set_tests_properties(mpi.${name}.np${np} PROPERTIES LABELS mpi TIMEOUT ${ATTN_MPI_CTEST_LIMIT}
        ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
    endforeach()
  endforeach()
  attn_mpi_wrap(${ATTN_MPI_LIMIT})
endif()

# attn.distributed (python/attn/distributed.py) under mpirun: pytest on every rank, when mpi4py is importable (the
# package's own Python implementation over mpi4py; it does not load libattn_mpi, whose C suites are above).
if(TARGET attn_mpi AND ATTN_MPI_TESTS AND Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import mpi4py, pytest, numpy" RESULT_VARIABLE _no_mpi4py
    OUTPUT_QUIET ERROR_QUIET)
  if(_no_mpi4py EQUAL 0)
    if(TARGET attn_pyext)
      add_dependencies(attn_mpi_check attn_pyext)
    endif()
    foreach(np IN LISTS ATTN_MPI_NPS)
      add_test(NAME mpi.test_distributed.np${np} COMMAND ${ATTN_MPI_WRAP} ${ATTN_MPIRUN} ${ATTN_MPIRUN_FLAGS}
        -x ATTN_LIBRARY -x PYTHONPATH -np ${np} ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
        ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_distributed.py)
      set_tests_properties(mpi.test_distributed.np${np} PROPERTIES LABELS mpi TIMEOUT ${ATTN_MPI_CTEST_LIMIT} ENVIRONMENT
        "OMP_NUM_THREADS=1;ATTN_LIBRARY=$<TARGET_FILE:attn>;PYTHONPATH=${PROJECT_SOURCE_DIR}/python")
    endforeach()
  else()
    message(STATUS "attn: mpi4py/pytest not importable by ${Python3_EXECUTABLE}: no attn.distributed MPI tests")
  endif()
endif()

# `attn run --workload cp` under mpirun -np 2 and 4 on small shapes (the bench itself: docs/CONTEXT_PARALLEL.md).
if(TARGET attn_mpi AND ATTN_MPI_TESTS AND ATTN_MPI_CLI AND TARGET attn_cli)
  add_dependencies(attn_mpi_check attn_cli)
  foreach(np 2 4)
    add_test(NAME mpi.cli_workload_cp.np${np} COMMAND ${ATTN_MPI_WRAP} ${ATTN_MPIRUN} ${ATTN_MPIRUN_FLAGS} -x ATTN_CP_SEQ -x ATTN_CP_CTX
      -np ${np} $<TARGET_FILE:attn_cli> run --workload cp --repeats 1)
    set_tests_properties(mpi.cli_workload_cp.np${np} PROPERTIES LABELS mpi TIMEOUT ${ATTN_MPI_CTEST_LIMIT}
      ENVIRONMENT "OMP_NUM_THREADS=1;ATTN_CP_SEQ=1024;ATTN_CP_CTX=1024"
      PASS_REGULAR_EXPRESSION "ring .*\n.*dcp .*\n.*ulysses")
  endforeach()
endif()
