# tests/fuzz: the corpus replay ctest (always; test_fuzz_replay.c is globbed as fuzz.test_fuzz_replay)
# and, with -DATTN_FUZZ=ON and clang, one libFuzzer binary per target (library instrumented for coverage):
# fuzz_dense, fuzz_varlen, fuzz_merge, fuzz_paged, fuzz_plan, fuzz_cache, fuzz_diffusion, fuzz_codec (one row each
# of fz_targets in fuzz_entries.c) and fuzz_workload (the CLI's workload parser). Seeds: corpus/<target>/.
#   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DATTN_FUZZ=ON -DATTN_SANITIZE="address;undefined"
#   build-fuzz/tests/fuzz_dense -max_total_time=60 tests/fuzz/corpus/dense
#   scripts/fuzz_campaign.sh runs them all (docs/ROBUSTNESS.md).
option(ATTN_FUZZ "Build the libFuzzer targets of tests/fuzz (clang)" OFF)
set(ATTN_FUZZ_TARGETS dense varlen merge paged plan cache diffusion codec)
# The differential and hidden-value targets (docs/ROBUSTNESS.md "Differential and hidden-value fuzzing"): one
# source each, fuzz_<t>.c over fuzz_diff.h; seeds corpus/<t>/, replayed by
# fuzz.test_fuzz_diff_replay (test_fuzz_diff_replay.c); defect inputs tests/fuzz/findings/ (not replayed).
set(ATTN_FUZZ_DIFF_TARGETS diff_dense diff_varlen diff_paged diff_piecewise diff_merge diff_quant diff_cache hidden)

# The CLI's workload parser and what it links (cli/ without main.c and the subcommands), for fuzz_workload and
# the replay; cJSON (Debian libcjson-dev) as in cli/CMakeLists.txt.
set(_fz_cli ${PROJECT_SOURCE_DIR}/cli)
# Without cJSON (e.g. a cross build) the replay skips the workload corpus.
find_library(ATTN_FUZZ_CJSON_LIB cjson)
find_path(ATTN_FUZZ_CJSON_INCLUDE cjson/cJSON.h)
if(ATTN_FUZZ_CJSON_LIB AND ATTN_FUZZ_CJSON_INCLUDE)
  add_library(attn_fuzz_cli STATIC ${_fz_cli}/workload.c ${_fz_cli}/util.c ${_fz_cli}/wl_default.c
    ${_fz_cli}/wl_serving.c ${_fz_cli}/wl_diffusion.c)
  target_include_directories(attn_fuzz_cli PUBLIC ${_fz_cli} ${ATTN_FUZZ_CJSON_INCLUDE})
  target_link_libraries(attn_fuzz_cli PUBLIC attn_static ${ATTN_FUZZ_CJSON_LIB} m)
endif()

if(TARGET test_fuzz_replay)
  target_compile_definitions(test_fuzz_replay PRIVATE ATTN_FUZZ_CORPUS="${CMAKE_CURRENT_LIST_DIR}/corpus")
  if(TARGET attn_fuzz_cli)
    target_link_libraries(test_fuzz_replay PRIVATE attn_fuzz_cli)
  else()
    target_compile_definitions(test_fuzz_replay PRIVATE FZ_NO_WORKLOAD)
  endif()
  set_tests_properties(fuzz.test_fuzz_replay PROPERTIES TIMEOUT 600)
endif()
if(TARGET test_fuzz_diff_replay)
  target_compile_definitions(test_fuzz_diff_replay PRIVATE ATTN_FUZZ_CORPUS="${CMAKE_CURRENT_LIST_DIR}/corpus")
  # GCC 12's aarch64 cross compiler stops with an internal compiler error (vect_transform_reduction) on
  # fuzz_diff_piecewise.c when it vectorises; this replay driver is test code, so it is built without the
  # loop vectoriser under GCC on every target (the same code everywhere).
  if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
    target_compile_options(test_fuzz_diff_replay PRIVATE -fno-tree-vectorize)
  endif()
  set_tests_properties(fuzz.test_fuzz_diff_replay PROPERTIES TIMEOUT 600)
endif()
if(ATTN_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ATTN_FUZZ=ON needs clang (libFuzzer)")
  endif()
  target_compile_options(attn_objects PRIVATE -fsanitize=fuzzer-no-link)
  # The coverage callbacks of that instrumentation live in a sanitizer runtime: without ATTN_SANITIZE nothing
  # would link one, and every program over the library (the replay ctest first) failed to link
  # (undefined __sanitizer_cov_*). The same flag at link time makes clang link its UBSan runtime, which has them.
  if(NOT ATTN_SANITIZE)
    target_link_options(attn_static INTERFACE -fsanitize=fuzzer-no-link)
    if(TARGET attn)
      target_link_options(attn PUBLIC -fsanitize=fuzzer-no-link)
    endif()
  endif()
  # ATTN_FUZZ_KERNEL_OPT (e.g. -O0): optimisation of the x86 SIMD kernel files alone (appended after the build's
  # own flags). clang 14 takes tens of minutes per AVX2/AVX-512 tile file at -O1 with ASan + UBSan + coverage on a
  # loaded 2-core machine, seconds at -O0; the fuzz inputs' valid shapes are tiny (FZ_MAX_WORK), so the kernels'
  # share of an execution is small and the rest of the library and the harness keep the campaign's -O1.
  set(ATTN_FUZZ_KERNEL_OPT "" CACHE STRING "Extra compile options of the x86 SIMD kernel folders in the fuzz build")
  if(ATTN_FUZZ_KERNEL_OPT)
    get_target_property(_fz_srcs attn_objects SOURCES)
    foreach(_s IN LISTS _fz_srcs)
      if(_s MATCHES "src/kernels/(avx2|avx512|avx512bf16|amx)/")
        set_property(SOURCE ${_s} TARGET_DIRECTORY attn_objects APPEND PROPERTY COMPILE_OPTIONS ${ATTN_FUZZ_KERNEL_OPT})
      endif()
    endforeach()
  endif()
  target_compile_options(attn_fuzz_cli PRIVATE -fsanitize=fuzzer-no-link)
  set(_i 0)
  foreach(t IN LISTS ATTN_FUZZ_TARGETS)
    add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/fuzz_entries.c)
    target_compile_definitions(fuzz_${t} PRIVATE FZ_TARGET_INDEX=${_i})
    math(EXPR _i "${_i} + 1")
  endforeach()
  add_executable(fuzz_workload ${CMAKE_CURRENT_LIST_DIR}/fuzz_workload.c)
  target_link_libraries(fuzz_workload PRIVATE attn_fuzz_cli)
  foreach(t IN LISTS ATTN_FUZZ_DIFF_TARGETS)
    add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/fuzz_${t}.c)
  endforeach()
  foreach(t IN LISTS ATTN_FUZZ_TARGETS ATTN_FUZZ_DIFF_TARGETS ITEMS workload)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${t} PRIVATE attn_test_harness)
    add_test(NAME fuzz.libfuzzer_${t} COMMAND fuzz_${t} -runs=0 ${CMAKE_CURRENT_LIST_DIR}/corpus/${t})
    set_tests_properties(fuzz.libfuzzer_${t} PROPERTIES LABELS fuzz TIMEOUT 300)
  endforeach()
endif()
