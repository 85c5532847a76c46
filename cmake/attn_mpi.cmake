# libattn_mpi — context parallelism over MPI: include/attn/attn_mpi.h, src/mpi/,
# docs/CONTEXT_PARALLEL.md. A separate library over libattn's public API; libattn itself never links MPI.
#   ATTN_MPI        AUTO (default: build it when find_package(MPI) finds a C MPI), ON (required), OFF
#   ATTN_MPI_TESTS  register the tests/mpi ctests (label mpi, run under mpirun); `make test-mpi` sets it
#   ATTN_MPI_CLI    the CLI's `attn run --workload cp` (default OFF); `make test-mpi` sets it
set(ATTN_MPI "AUTO" CACHE STRING "Build libattn_mpi: AUTO (when MPI is found), ON or OFF")
option(ATTN_MPI_TESTS "Register the MPI tests (tests/mpi, label mpi; run by make test-mpi)" OFF)
# The CLI's `cp` workload (cli/wl_cp.c) links libattn_mpi; off by default so the plain CLI (and its golden
# help output) stays the same wherever MPI happens to be installed. make test-mpi turns it on.
option(ATTN_MPI_CLI "Build the attn CLI with the MPI workload cp (needs libattn_mpi)" OFF)
set(ATTN_MPI_FOUND OFF)
if(NOT ATTN_MPI STREQUAL "OFF")
  if(ATTN_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS C)
  else()
    find_package(MPI QUIET COMPONENTS C)
  endif()
  if(MPI_C_FOUND)
    set(ATTN_MPI_FOUND ON)
  endif()
endif()

if(ATTN_MPI_FOUND)
  file(GLOB ATTN_MPI_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/mpi/*.c)
  add_library(attn_mpi SHARED ${ATTN_MPI_SOURCES})
  target_include_directories(attn_mpi PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # src/ only for src/mpi/mpi_common.h and the header-only error plumbing it shares with libattn
  # (src/core/error_channel.h): libattn_mpi is a client of attn.h and links no libattn internals.
  target_include_directories(attn_mpi PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_compile_options(attn_mpi PRIVATE ${ATTN_WARNINGS})
  if(TARGET attn)
    target_link_libraries(attn_mpi PUBLIC attn MPI::MPI_C PRIVATE m)
  else()
    target_link_libraries(attn_mpi PUBLIC attn_static MPI::MPI_C PRIVATE m)
  endif()
  set_target_properties(attn_mpi PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
    C_VISIBILITY_PRESET hidden)
  add_library(attn::attn_mpi ALIAS attn_mpi)
  # Static twin over attn_static, for programs that link libattn statically (the CLI's `cp` workload).
  add_library(attn_mpi_static STATIC ${ATTN_MPI_SOURCES})
  target_include_directories(attn_mpi_static PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_compile_options(attn_mpi_static PRIVATE ${ATTN_WARNINGS})
  target_compile_definitions(attn_mpi_static PUBLIC ATTN_STATIC_DEFINE)
  target_link_libraries(attn_mpi_static PUBLIC attn_static MPI::MPI_C PRIVATE m)
  install(FILES include/attn/attn_mpi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attn)
  install(TARGETS attn_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  message(STATUS "attn: building libattn_mpi (MPI ${MPI_C_VERSION})")
elseif(ATTN_MPI STREQUAL "AUTO")
  message(STATUS "attn: MPI not found: no libattn_mpi (bash scripts/mpi_env.sh installs Open MPI)")
endif()
