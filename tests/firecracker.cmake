# The firecracker driver: checked against Firecracker's own API spec (../shared/firecracker/
# firecracker.yaml) through a stand-in VMM and a fake jailer; a real microVM when FIRECRACKER_BIN
# and JAILER_BIN name real binaries (skipped otherwise).
set(fc_test_dir ${CMAKE_CURRENT_SOURCE_DIR}/integration/firecracker)
if(TARGET sbxworker)
  add_executable(test_fc_driver ${fc_test_dir}/test_fc_driver.c)
  target_link_libraries(test_fc_driver PRIVATE sbxworker PkgConfig::CMOCKA PkgConfig::JANSSON)
  target_compile_definitions(test_fc_driver PRIVATE SBX_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                                    SBX_BUILD_DIR="${CMAKE_BINARY_DIR}")

  # The stand-in's YAML parser comes from its package-lock.json (installed once, as setup).
  add_test(NAME it.firecracker.setup
           COMMAND sh -c "[ -d node_modules/js-yaml ] || npm ci --no-audit --no-fund"
           WORKING_DIRECTORY ${fc_test_dir})
  set_tests_properties(it.firecracker.setup PROPERTIES FIXTURES_SETUP fc_standin)

  add_test(NAME it.firecracker.standin_spec COMMAND node --test ${fc_test_dir}/standin.test.js)
  # In a network namespace of their own (tests/in-netns.sh): the Sandboxes' links and `table inet
  # sbx` are made there, never in the host's nftables.
  add_test(NAME it.firecracker.driver
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh $<TARGET_FILE:test_fc_driver>)
  add_test(NAME it.firecracker.real_vm
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh $<TARGET_FILE:test_fc_driver> --real)
  set_tests_properties(it.firecracker.standin_spec it.firecracker.driver
                       PROPERTIES FIXTURES_REQUIRED fc_standin TIMEOUT 120 SKIP_RETURN_CODE 77)
  set_tests_properties(it.firecracker.real_vm PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()

sbx_test_labels(root it.firecracker.driver it.firecracker.real_vm)
