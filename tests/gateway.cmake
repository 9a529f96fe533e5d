# The gateway and the gateway side of the store: cmocka unit tests and live HTTP integration tests.
add_executable(test_store_api ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_api.c)
target_link_libraries(test_store_api PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.gateway.store_api COMMAND test_store_api)
