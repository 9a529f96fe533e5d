# The gateway and the gateway side of the store: cmocka unit tests and live HTTP integration tests.
add_executable(test_store_api ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_api.c
                              ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_link_libraries(test_store_api PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.store.api COMMAND test_store_api)
# An App's quotas in the store (also on PostgreSQL: tests/pg.cmake).
add_executable(test_store_quotas ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_quotas.c
                                 ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_include_directories(test_store_quotas PRIVATE ${CMAKE_SOURCE_DIR}/common/store/sql)
target_link_libraries(test_store_quotas PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE
                                                Threads::Threads)
add_test(NAME unit.store.quotas COMMAND test_store_quotas)

foreach(t auth json_input json_text render)
  add_executable(test_${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE sbxgateway PkgConfig::CMOCKA)
endforeach()
# Named after the folder of what they test: json_text and render are common/'s.
add_test(NAME unit.gateway.auth COMMAND test_auth)
add_test(NAME unit.gateway.json_input COMMAND test_json_input)
add_test(NAME unit.common.json_text COMMAND test_json_text)
add_test(NAME unit.common.render COMMAND test_render)

# Live integration tests: the real sbx-gateway on a loopback port with a temporary data dir,
# driven by Node's built-in test runner.
add_executable(sbx-test-notify ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway/notify_send.c)
target_link_libraries(sbx-test-notify PRIVATE sbxcommon)

find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE)
  foreach(it api isolation longpoll durability limits key_cache revoke_streams secrets quotas)
    add_test(NAME it.gateway.${it}
             COMMAND ${NODE_EXECUTABLE} --test
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway/${it}.test.mjs)
    set_tests_properties(it.gateway.${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_NOTIFY_BIN=$<TARGET_FILE:sbx-test-notify>"
      TIMEOUT 120)
  endforeach()
  # HTTPS (tls_cert_file): certificates made with the openssl command line tool.
  find_program(OPENSSL_EXECUTABLE openssl)
  if(OPENSSL_EXECUTABLE)
    add_test(NAME it.gateway.tls
             COMMAND ${NODE_EXECUTABLE} --test ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway/tls.test.mjs)
    set_tests_properties(it.gateway.tls PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBXCTL_BIN=$<TARGET_FILE:sbxctl>"
      TIMEOUT 120)
  endif()
endif()

# Removing an untrusted tree (a Workspace) by directory fds, against a concurrent exchanger.
add_executable(test_tree_remove ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_tree_remove.c)
target_link_libraries(test_tree_remove PRIVATE sbxcommon PkgConfig::CMOCKA Threads::Threads)
add_test(NAME unit.common.tree_remove COMMAND test_tree_remove)
add_executable(test_fs_last_line ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_fs_last_line.c)
target_link_libraries(test_fs_last_line PRIVATE sbxcommon PkgConfig::CMOCKA)
add_test(NAME unit.common.fs_last_line COMMAND test_fs_last_line)
set_tests_properties(unit.common.tree_remove PROPERTIES TIMEOUT 120)

# tools/bench/store_enqueue.c: the ingestion scenario's store-alone baseline (the group commit and
# its statements, no HTTP). A short run keeps it working; it asserts nothing about speed.
add_executable(sbx-bench-store-enqueue ${CMAKE_SOURCE_DIR}/tools/bench/store_enqueue.c)
target_link_libraries(sbx-bench-store-enqueue PRIVATE sbxcommon)
set_target_properties(sbx-bench-store-enqueue PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                         ${CMAKE_BINARY_DIR}/tools/bench)
add_test(NAME it.gateway.bench_store_enqueue_runs
         COMMAND sh -c "d=$(mktemp -d) && $<TARGET_FILE:sbx-bench-store-enqueue> $d/sbx.db 10 500 16 && sqlite3 $d/sbx.db 'SELECT count(*) FROM messages' | grep -qx 500; r=$?; rm -rf $d; exit $r")

# The concurrent exchanger's rounds: over a minute under ASan on two busy cores.
sbx_test_labels(slow unit.common.tree_remove)
