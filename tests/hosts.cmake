# The hosts area: several worker hosts on one store. Unit: registration, host loss and placement
# in the store (cmocka; on SQLite here, on PostgreSQL as unit.store.pg.hosts in pg.cmake).
# Integration: worker processes of two hosts (different host ids and jail roots) and two gateways
# on one database, on the fork test driver.
add_executable(test_store_hosts ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_hosts.c
                                ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_link_libraries(test_store_hosts PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.store.hosts COMMAND test_store_hosts)

find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE)
  foreach(it placement two_hosts)
    add_test(NAME it.hosts.${it}
             COMMAND ${NODE_EXECUTABLE} --test --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/hosts/${it}.test.mjs)
    set_tests_properties(it.hosts.${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>;SBX_SBXCTL_BIN=$<TARGET_FILE:sbxctl>"
      TIMEOUT 420)
  endforeach()
endif()

# The same on PostgreSQL, under the throwaway cluster of tests/pg-run.sh (the harness makes a
# database per cluster on it). Registered where the PostgreSQL store and its fixture exist.
if(NODE_EXECUTABLE AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh)
  foreach(it placement two_hosts)
    add_test(NAME it.pg.hosts.${it}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${NODE_EXECUTABLE} --test
                     --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/hosts/${it}.test.mjs)
    set_tests_properties(it.pg.hosts.${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>;SBX_SBXCTL_BIN=$<TARGET_FILE:sbxctl>"
      TIMEOUT 600)
  endforeach()
endif()

# Writers without a lock between them: three gateways and two hosts on one PostgreSQL database,
# the same Sessions written through every gateway at once, and an events reader paging by cursor
# (tests/integration/hosts/concurrency.test.mjs). PostgreSQL only: SQLite has one writer.
if(NODE_EXECUTABLE AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh)
  add_test(NAME it.pg.concurrency
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${NODE_EXECUTABLE} --test
                   --test-concurrency=1
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/hosts/concurrency.test.mjs)
  set_tests_properties(it.pg.concurrency PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>"
    TIMEOUT 180)
endif()

# Throughput waits (1,000 messages through two hosts; three gateways writing at once): over a
# minute, more on a busy machine.
sbx_test_labels(slow it.hosts.two_hosts it.pg.hosts.two_hosts it.pg.concurrency it.hosts.placement
                it.pg.hosts.placement)
