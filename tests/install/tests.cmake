# Install rules, the exported CMake package and the pkg-config file, checked from a downstream project.
# Skipped in sanitizer builds (the consumer would need the sanitizer runtime flags too).
if(ATTN_BUILD_SHARED AND NOT ATTN_SANITIZE)
  # A cross build (cmake/toolchain-aarch64.cmake) configures the consumer with the same toolchain file and
  # runs the consumers under the emulator; the pkg-config consumer is compiled with the cross compiler.
  set(_cross "")
  if(CMAKE_CROSSCOMPILING)
    string(REPLACE ";" "|" _emu "${CMAKE_CROSSCOMPILING_EMULATOR}")
    set(_tcf "${CMAKE_TOOLCHAIN_FILE}")
    if(ATTN_TOOLCHAIN_FILE)
      set(_tcf "${ATTN_TOOLCHAIN_FILE}") # absolute (cmake/toolchain-aarch64.cmake sets it)
    endif()
    set(_cross "-DTOOLCHAIN=${_tcf}" "-DEMULATOR=${_emu}" "-DCC=${CMAKE_C_COMPILER}")
  endif()
  add_test(NAME install.find_package_and_pkg_config
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DSRC_DIR=${CMAKE_CURRENT_LIST_DIR}
            -DWORK_DIR=${PROJECT_BINARY_DIR}/install-check ${_cross} -P ${CMAKE_CURRENT_LIST_DIR}/install_check.cmake)
  set_tests_properties(install.find_package_and_pkg_config PROPERTIES LABELS install TIMEOUT 300)
endif()
