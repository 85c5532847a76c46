# tests/unit/tests.cmake — the ABI check (included by tests/CMakeLists.txt): the exported dynamic symbols of
# libattn.so must equal abi/exported_symbols.txt and the ATTN_API declarations of attn.h and attn_experimental.h.
# After adding a public function, regenerate the list with:  cmake --build <build-dir> --target update_abi
if(TARGET attn)
  find_program(ATTN_NM NAMES nm llvm-nm)
  if(ATTN_NM)
    set(_abi_args -DNM=${ATTN_NM} -DLIB=$<TARGET_FILE:attn> -DLIST=${PROJECT_SOURCE_DIR}/abi/exported_symbols.txt
                  -DHEADER=${PROJECT_SOURCE_DIR}/include/attn/attn.h)
    add_test(NAME unit.abi_exported_symbols
             COMMAND ${CMAKE_COMMAND} ${_abi_args} -DMODE=check -P ${CMAKE_CURRENT_LIST_DIR}/abi_check.cmake)
    set_tests_properties(unit.abi_exported_symbols PROPERTIES LABELS unit)
    add_custom_target(update_abi
      COMMAND ${CMAKE_COMMAND} ${_abi_args} -DMODE=update -P ${CMAKE_CURRENT_LIST_DIR}/abi_check.cmake
      DEPENDS attn
      COMMENT "Regenerating abi/exported_symbols.txt from nm -D of libattn.so")
  else()
    message(STATUS "attn: nm not found; the ABI symbol test is skipped")
  endif()
endif()
