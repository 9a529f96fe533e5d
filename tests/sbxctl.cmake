# sbxctl and the auditor views against a live database built by the real store
# (tests/integration/sbxctl/test_sbxctl.c runs build/tools/sbxctl as a process).
add_executable(test_it_sbxctl ${CMAKE_CURRENT_SOURCE_DIR}/integration/sbxctl/test_sbxctl.c)
target_link_libraries(test_it_sbxctl PRIVATE sbxworker sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE
                      PkgConfig::JANSSON Threads::Threads)
target_compile_definitions(test_it_sbxctl PRIVATE SBXCTL_BIN="$<TARGET_FILE:sbxctl>")
add_dependencies(test_it_sbxctl sbxctl)
add_test(NAME it.sbxctl.cli COMMAND test_it_sbxctl)
set_tests_properties(it.sbxctl.cli PROPERTIES TIMEOUT 120)

# The same against a running sbx: the real gateway and a worker (sbx-worker-fork, the worker with
# its fork test driver, from tests/worker.cmake) on loopback, driven by Node's test runner.
find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE AND TARGET sbx-gateway)
  add_test(NAME it.sbxctl.live
           COMMAND ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/sbxctl/live.test.mjs)
  set_tests_properties(it.sbxctl.live PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>;SBXCTL_BIN=$<TARGET_FILE:sbxctl>"
    TIMEOUT 180)
endif()
