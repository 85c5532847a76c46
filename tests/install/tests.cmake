# Install rules, the exported CMake package and the pkg-config file, checked from a downstream project.
# Skipped in sanitizer builds (the consumer would need the sanitizer runtime flags too).
if(ATTN_BUILD_SHARED AND NOT ATTN_SANITIZE)
  add_test(NAME install.find_package_and_pkg_config
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DSRC_DIR=${CMAKE_CURRENT_LIST_DIR}
            -DWORK_DIR=${PROJECT_BINARY_DIR}/install-check -P ${CMAKE_CURRENT_LIST_DIR}/install_check.cmake)
  set_tests_properties(install.find_package_and_pkg_config PROPERTIES LABELS install TIMEOUT 300)
endif()
