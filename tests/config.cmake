# Configuration: precedence of file, environment and flags; refusal of bad values.
add_executable(test_config ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_config.c)
target_link_libraries(test_config PRIVATE sbxcommon PkgConfig::CMOCKA)
add_test(NAME unit.config COMMAND test_config)
