# CLI tests (label cli): each runs the built `attn` binary through run_cli.cmake and asserts its exit code,
# messages, golden --help texts (ATTN_CLI_UPDATE=1 ctest -L cli rewrites them) and oracle checks.
# Included by tests/CMakeLists.txt; the target is `attn_cli` (the library owns the name `attn`).
if(NOT TARGET attn_cli)
  return()
endif()
set(_cli_dir ${CMAKE_CURRENT_LIST_DIR})
set(_small ${PROJECT_SOURCE_DIR}/cli/examples/small.json)

# The tolerances the CLI checks with (cli/util.c), per kernel table: a unit test on the CLI's own code.
find_library(ATTN_CLI_TEST_CJSON cjson)
if(ATTN_CLI_TEST_CJSON)
  add_executable(test_cli_tolerance ${_cli_dir}/cli_tolerance.c ${PROJECT_SOURCE_DIR}/cli/util.c)
  target_include_directories(test_cli_tolerance PRIVATE ${PROJECT_SOURCE_DIR}/cli)
  target_link_libraries(test_cli_tolerance PRIVATE attn_test_harness ${ATTN_CLI_TEST_CJSON})
  add_test(NAME cli.test_cli_tolerance COMMAND test_cli_tolerance)
  set_tests_properties(cli.test_cli_tolerance PROPERTIES LABELS cli)
endif()

# attn_cli_test(<name> RC <code> ARGS <a;b> [ENV <k=v;..>] [OUT <re;..>] [ERR <re;..>] [LACKS <re>]
#               [GOLDEN <file>] [JSON_FAILED <n>] [ERR_EMPTY])
function(attn_cli_test name)
  cmake_parse_arguments(T "ERR_EMPTY" "RC;GOLDEN;JSON_FAILED;LACKS" "ARGS;ENV;OUT;ERR" ${ARGN})
  string(REPLACE ";" "|" _args "${T_ARGS}")
  set(_defs -DATTN=$<TARGET_FILE:attn_cli> "-DARGS=${_args}" -DEXPECT_RC=${T_RC}
    -DWORKDIR=${PROJECT_SOURCE_DIR})
  if(CMAKE_CROSSCOMPILING_EMULATOR)
    # cross build (cmake/toolchain-aarch64.cmake): the script starts the binary under the emulator, as ctest
    # does for the suites' executables
    string(REPLACE ";" "|" _e "${CMAKE_CROSSCOMPILING_EMULATOR}")
    list(APPEND _defs "-DEMULATOR=${_e}")
  endif()
  if(T_ENV)
    string(REPLACE ";" "|" _e "${T_ENV}")
    list(APPEND _defs "-DENV=${_e}")
  endif()
  if(T_OUT)
    string(REPLACE ";" "|" _e "${T_OUT}")
    list(APPEND _defs "-DSTDOUT_HAS=${_e}")
  endif()
  if(T_ERR)
    string(REPLACE ";" "|" _e "${T_ERR}")
    list(APPEND _defs "-DSTDERR_HAS=${_e}")
  endif()
  if(T_LACKS)
    list(APPEND _defs "-DSTDOUT_LACKS=${T_LACKS}")
  endif()
  if(T_GOLDEN)
    list(APPEND _defs -DGOLDEN=${_cli_dir}/golden/${T_GOLDEN})
  endif()
  if(DEFINED T_JSON_FAILED)
    list(APPEND _defs -DJSON_FAILED=${T_JSON_FAILED})
  endif()
  if(T_ERR_EMPTY)
    list(APPEND _defs -DSTDERR_EMPTY=1)
  endif()
  add_test(NAME cli.${name} COMMAND ${CMAKE_COMMAND} ${_defs} -P ${_cli_dir}/run_cli.cmake)
  set_tests_properties(cli.${name} PROPERTIES LABELS cli TIMEOUT 300)
endfunction()

# ---- --help everywhere (golden) and the version ----------------------------------------------------
attn_cli_test(help RC 0 ARGS --help GOLDEN help.txt ERR_EMPTY)
foreach(cmd run check bench info)
  attn_cli_test(help_${cmd} RC 0 ARGS ${cmd} --help GOLDEN help_${cmd}.txt ERR_EMPTY)
endforeach()
attn_cli_test(help_cmd RC 0 ARGS help check OUT "^Usage: attn check")
attn_cli_test(version RC 0 ARGS --version OUT "^attn ${PROJECT_VERSION}\n$")
attn_cli_test(info_version RC 0 ARGS info
  OUT "^attn ${PROJECT_VERSION} " "cpu features:" "kernel tables: generic \\(usable\\)" "chosen kernels: "
      "threads: +[0-9]+")
attn_cli_test(info_isa_threads RC 0 ARGS info --isa generic --threads 3
  OUT "chosen kernels: generic \\(--isa\\)" "threads: +3\n")
attn_cli_test(info_json RC 0 ARGS info --json OUT "\"version\":[ \t]*\"${PROJECT_VERSION}\"" "\"isas\"")

# ---- usage errors: exit 2 and a message naming the problem -------------------------------------------
attn_cli_test(no_args RC 2 ARGS "" ERR "Usage: attn <command>")
attn_cli_test(bad_command RC 2 ARGS frobnicate ERR "attn: unknown command 'frobnicate'")
attn_cli_test(bad_flag RC 2 ARGS run --bogus ERR "attn run: unknown option '--bogus'" "Try 'attn run --help'")
attn_cli_test(flag_not_for_cmd RC 2 ARGS info --workload default ERR "attn info: unknown option '--workload'")
attn_cli_test(missing_value RC 2 ARGS run --threads ERR "option '--threads' needs a value")
attn_cli_test(bad_threads RC 2 ARGS run --threads 0 ERR "--threads: expected an integer in 1..1024, got '0'")
attn_cli_test(bad_repeats RC 2 ARGS bench --repeats=x ERR "--repeats: expected an integer in 1..4096, got 'x'")
attn_cli_test(bad_check_rows RC 2 ARGS run --check-rows -3 ERR "--check-rows: expected 'all' or an integer")
attn_cli_test(bad_isa RC 2 ARGS check --isa sse9 ERR "attn check: --isa sse9: " "Kernel tables usable here: generic")
attn_cli_test(unknown_workload RC 2 ARGS run --workload nope
  ERR "unknown workload 'nope': not a built-in \\(default, check, serving, diffusion\\) and no such file")
attn_cli_test(missing_file RC 2 ARGS check --workload does/not/exist.json
  ERR "cannot read 'does/not/exist.json': No such file or directory")

# ---- malformed workload files: exit 2, message with the file, the key path and the problem -------------
set(_bad ${_cli_dir}/data)
attn_cli_test(json_syntax RC 2 ARGS check --workload ${_bad}/bad_syntax.json
  ERR "bad_syntax.json: line 4, column [0-9]+: JSON syntax error")
attn_cli_test(json_truncated RC 2 ARGS check --workload ${_bad}/bad_truncated.json
  ERR "bad_truncated.json: line [0-9]+, column [0-9]+: JSON syntax error")
attn_cli_test(json_type RC 2 ARGS run --workload ${_bad}/bad_window.json
  ERR "bad_window.json: cases\\[1\\]\\.window: expected an array \\[left, right\\] of 2 integers, got a string")
attn_cli_test(json_unknown_key RC 2 ARGS run --workload ${_bad}/bad_key.json
  ERR "bad_key.json: cases\\[0\\]\\.causl: unknown key \\(known keys: name, layout")
attn_cli_test(json_heads RC 2 ARGS run --workload ${_bad}/bad_heads.json
  ERR "bad_heads.json: cases\\[0\\]: num_kv_heads=3 does not divide num_heads=8")
attn_cli_test(json_range RC 2 ARGS run --workload ${_bad}/bad_range.json
  ERR "bad_range.json: defaults\\.head_size: 300 is outside 1\\.\\.256")
attn_cli_test(json_enum RC 2 ARGS run --workload ${_bad}/bad_enum.json
  ERR "bad_enum.json: cases\\[0\\]\\.dtype: unknown dtype \"f64\"")
attn_cli_test(json_varlen RC 2 ARGS run --workload ${_bad}/bad_varlen.json
  ERR "bad_varlen.json: cases\\[0\\]: seq_k has 2 entries but seq_q has 3")
attn_cli_test(json_no_cases RC 2 ARGS run --workload ${_bad}/bad_no_cases.json
  ERR "bad_no_cases.json: cases: missing")
attn_cli_test(json_top_level RC 2 ARGS run --workload ${_bad}/bad_top.json
  ERR "bad_top.json: the top level must be an object")
# names are printed (tables, --json): invalid UTF-8 or control characters would break the output
attn_cli_test(json_name_control RC 2 ARGS check --workload ${_bad}/bad_name_control.json
  ERR "bad_name_control.json: cases\\[1\\]\\.name: contains a control character")
attn_cli_test(json_name_utf8 RC 2 ARGS check --json --workload ${_bad}/bad_name_utf8.json
  ERR "bad_name_utf8.json: cases\\[0\\]\\.name: is not valid UTF-8")

# ---- oracle checks ------------------------------------------------------------------------------------
attn_cli_test(check_small RC 0 ARGS check --workload ${_small}
  OUT "workload 'small'" "oracle comparison on all query rows" "8 cases, 0 failed" LACKS "FAIL")
attn_cli_test(check_default RC 0 ARGS check OUT "workload 'check'" "12 cases, 0 failed" LACKS "FAIL")
attn_cli_test(check_generic_1thread RC 0 ARGS check --isa generic --threads 1
  OUT "isa generic, 1 thread\n" "12 cases, 0 failed")
attn_cli_test(check_rows_subset RC 0 ARGS check --workload ${_small} --check-rows 3
  OUT "last 3 query rows of each sequence" "8 cases, 0 failed")
# the comparison can fail: a corrupted output value must give exit 1 and FAIL rows
attn_cli_test(check_detects_mismatch RC 1 ARGS check --workload ${_small} ENV ATTN_CLI_FAULT=1
  OUT "FAIL" "outside tolerance" "8 cases, 8 failed")
attn_cli_test(run_small RC 0 ARGS run --workload ${_small} --repeats 2
  OUT "median ms" "GFLOP/s" "last 64 query rows" "gqa-causal-f32 +2x37/100 h8/2 d64 +f32 causal lse" "0 failed")
# GFLOP counts exactly the visible pairs: 2 x (37 rows causal on 100 keys) = 6068 pairs x 2 x 8 heads x (64+64);
# 96 rows causal with window (31, 0) = 2576 pairs x 2 x 8 x 128
attn_cli_test(run_json RC 0 ARGS run --workload ${_small} --repeats 1 --json JSON_FAILED 0
  OUT "\"time_median_s\"" "\"max_abs_err\"" "\"gflop\":[ \t]*0\\.012427264," "\"gflop\":[ \t]*0\\.005275648,")
attn_cli_test(run_json_fault RC 1 ARGS run --workload ${_small} --repeats 1 --json ENV ATTN_CLI_FAULT=1
  JSON_FAILED 8)
attn_cli_test(bench_small RC 0 ARGS bench --workload ${_small} --repeats 3
  OUT "min ms" "median ms" "no oracle comparison" "8 cases, 0 failed" ERR_EMPTY)

# the diffusion workload, scaled down in `check` mode so the oracle covers every row
attn_cli_test(check_diffusion RC 0 ARGS check --workload diffusion
  OUT "joint-padded-text" "piecewise-video" "quant-mxfp4" "11 cases, 0 failed")

# ---- bad ATTN_ISA, argument and JSON errors, size guards, table layout -----------------------------------------
# `attn info` works whatever ATTN_ISA says (it is where the usable tables are listed); other commands refuse a
# bad ATTN_ISA with the list of usable tables, and --isa overrides it
attn_cli_test(info_bad_env_isa RC 0 ARGS info ENV ATTN_ISA=bogus
  OUT "chosen kernels: [a-z0-9]+ \\(best for this CPU; ATTN_ISA=bogus ignored: not usable\\)"
      "warning: +ATTN_ISA=bogus is unknown or not runnable on this CPU.*usable kernel tables: generic"
  ERR "attn info: warning: ATTN_ISA=bogus")
attn_cli_test(info_json_bad_env_isa RC 0 ARGS info --json ENV ATTN_ISA=bogus
  OUT "\"warnings\":[ \t]*\\[\"ATTN_ISA=bogus is unknown")
attn_cli_test(bad_env_isa RC 2 ARGS check ENV ATTN_ISA=bogus
  ERR "attn check: ATTN_ISA=bogus is unknown or not runnable on this CPU; usable kernel tables: generic"
      "pass --isa NAME")
attn_cli_test(bad_env_isa_overridden RC 0 ARGS check --isa generic --workload ${_small} ENV ATTN_ISA=bogus
  OUT "isa generic, " "8 cases, 0 failed")
# the thread count is clamped to the API's 1..1024 and says so
attn_cli_test(info_threads_clamped RC 0 ARGS info ENV OMP_NUM_THREADS=5000
  OUT "threads: +1024 \\(OMP_NUM_THREADS=5000 clamped to 1024\\)\n")
attn_cli_test(version_extra RC 2 ARGS --version extra ERR "attn: --version takes no arguments, got 'extra'")
attn_cli_test(help_extra RC 2 ARGS --help extra ERR "attn: --help takes no arguments, got 'extra'")
attn_cli_test(check_repeats_hint RC 2 ARGS check --repeats 1
  ERR "attn check: unknown option '--repeats' \\(check runs each case once; `attn run --repeats N` times it\\)")
# JSON strictness: varlen needs lists, duplicate keys and deep nesting are named
attn_cli_test(json_varlen_int RC 2 ARGS check --workload ${_bad}/bad_varlen_int.json
  ERR "bad_varlen_int.json: cases\\[0\\]: layout \"varlen\" needs seq_q as a list of lengths, got an integer \\(write \\[5\\]")
attn_cli_test(json_duplicate RC 2 ARGS check --workload ${_bad}/bad_duplicate.json
  ERR "bad_duplicate.json: cases\\[0\\]\\.seq_q: duplicate key")
attn_cli_test(json_deep RC 2 ARGS check --workload ${_bad}/bad_deep.json
  ERR "bad_deep.json: line 1, column 33: nesting too deep \\(more than 32 levels")
# compute-size guard: the fast path or the oracle over its limit is refused before anything runs
attn_cli_test(too_large RC 2 ARGS check --workload ${_bad}/bad_huge.json
  ERR "attn check: case 'huge' \\(cases\\[0\\]\\) is too large: ~1\\.13e\\+06 GFLOP per attention call \\(limit 2000\\)"
      "Pass --force to run it anyway\\.")
attn_cli_test(oracle_too_large RC 2 ARGS check --workload ${_bad}/big_oracle.json
  ERR "case 'long-prefill' \\(cases\\[0\\]\\) is too large: ~1\\.1e\\+03 GFLOP per attention call \\(limit 2000\\), ~1\\.1e\\+03 GFLOP of oracle work.*limit 200\\)"
      "or compare fewer rows with --check-rows R")
# case-insensitive layouts; cells padded by display width (UTF-8 code points, CJK two columns)
attn_cli_test(table_utf8 RC 0 ARGS check --workload ${_bad}/names_utf8.json
  OUT "größe-ü                    1x4/4 h2/2 d16                     f32 bnsd " "[^ ]plain                      1x4/4 h2/2 d16                     f32 "
      "日本語                     2 seqs 7/7 h2/2 d16                f32 varlen " "3 cases, 0 failed")
# the serving workload (paged KV cache), quick: one timed call, the last 4 rows of each request vs the oracle
# (contexts up to 16384 keys; up to 2048 under ATTN_TEST_SMALL=1, the sanitizer and qemu tiers)
attn_cli_test(run_serving RC 0 ARGS run --workload serving --repeats 1 --check-rows 4
  OUT "workload 'serving'" "decode-only bs16 +16req 16tok/<=[0-9]+ h32/8 d128 +bf16 DecodeOnly"
      "mixed-step bs128 " "8 cases, 0 failed" LACKS "FAIL")
# ~15 s in Release, ~3 min under ASan+UBSan Debug
set_tests_properties(cli.run_serving PROPERTIES TIMEOUT 900)
