# tests/kernels/test_amx_emulated.c compiles the amx table's kernel source a second time against a scalar model
# of the tile instructions: it needs the AVX-512 + AVX512-BF16 flags of that file, on x86-64 only.
# The kernel source falls back to the avx512 and avx512bf16 tables' entries, so those must be compiled in too.
if(TARGET test_amx_emulated AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64" AND "avx512" IN_LIST ATTN_COMPILED_ISAS
   AND "avx512bf16" IN_LIST ATTN_COMPILED_ISAS)
  include(CheckCCompilerFlag)
  check_c_compiler_flag("-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16" ATTN_CC_HAS_AMX_EMU_FLAGS)
  if(ATTN_CC_HAS_AMX_EMU_FLAGS)
    # only the kernel source carries the flags: the test's own code must run (and skip) on any x86-64 CPU
    target_sources(test_amx_emulated PRIVATE ${CMAKE_CURRENT_LIST_DIR}/amx_emulated_tu.c)
    set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/amx_emulated_tu.c PROPERTIES COMPILE_OPTIONS
                                "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512bf16;-mfma;-mf16c")
    target_compile_definitions(test_amx_emulated PRIVATE ATTN_TEST_AMX_EMULATED)
  endif()
endif()
