# Per-test settings of the conformance suite. Under the sanitizers the driver-path matrix runs on the fastest
# kernel table only (every table's kernels are still checked by tests/kernels under the sanitizers).
if(ATTN_SANITIZE AND TEST conformance.test_driver_paths)
  set_tests_properties(conformance.test_driver_paths PROPERTIES ENVIRONMENT "ATTN_TEST_ONE_ISA=1")
endif()
