# The gateway and the gateway side of the store: cmocka unit tests and live HTTP integration tests.
add_executable(test_store_api ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_api.c)
target_link_libraries(test_store_api PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.gateway.store_api COMMAND test_store_api)

# Live integration tests: the real sbx-gateway on a loopback port with a temporary data dir,
# driven by Node's built-in test runner.
find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE)
  foreach(it api isolation longpoll durability limits)
    add_test(NAME it.gateway.${it}
             COMMAND ${NODE_EXECUTABLE} --test
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway/${it}.test.mjs)
    set_tests_properties(it.gateway.${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>" TIMEOUT 120)
  endforeach()
endif()
