# sbxctl and the auditor views against a live database built by the real store
# (tests/integration/sbxctl/test_sbxctl.c runs build/tools/sbxctl as a process).
add_executable(test_it_sbxctl ${CMAKE_CURRENT_SOURCE_DIR}/integration/sbxctl/test_sbxctl.c)
target_link_libraries(test_it_sbxctl PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE
                      PkgConfig::JANSSON Threads::Threads)
target_compile_definitions(test_it_sbxctl PRIVATE SBXCTL_BIN="$<TARGET_FILE:sbxctl>")
add_dependencies(test_it_sbxctl sbxctl)
add_test(NAME it.sbxctl.cli COMMAND test_it_sbxctl)
set_tests_properties(it.sbxctl.cli PROPERTIES TIMEOUT 120)
