# The PostgreSQL store: its engine (common/store/sql/sql_pg.c) against a throwaway cluster that
# tests/pg-run.sh starts for the test and removes afterwards.
# The cluster the other PostgreSQL tests share, a fresh database each (tests/CMakeLists.txt gives
# them the fixture): started once instead of an initdb and a server start per test.
set(sbx_pg_shared_dir ${CMAKE_BINARY_DIR}/pg-shared)
add_test(NAME it.pg.fixture.start
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh --shared-start ${sbx_pg_shared_dir})
add_test(NAME it.pg.fixture.stop
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh --shared-stop ${sbx_pg_shared_dir})
set_tests_properties(it.pg.fixture.start PROPERTIES FIXTURES_SETUP pg_cluster TIMEOUT 120)
set_tests_properties(it.pg.fixture.stop PROPERTIES FIXTURES_CLEANUP pg_cluster TIMEOUT 120)
# Tests that stop or restart their cluster, or read what is cluster-wide (the oldest running
# transaction), keep a cluster of their own.
set(sbx_pg_own_cluster it.pg.fixture.start it.pg.fixture.stop unit.store.pg.engine it.notify.pg)

add_executable(test_sql_pg ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sql_pg.c)
target_link_libraries(test_sql_pg PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::LIBPQ
                                          Threads::Threads)
add_test(NAME unit.store.pg.engine COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_sql_pg>)
set_tests_properties(unit.store.pg.engine PROPERTIES TIMEOUT 300)

# The API integration suite again, on PostgreSQL: the same test files, each under a throwaway
# cluster in which the harness (tests/integration/gateway/harness.mjs) gives every fresh data
# directory a database of its own and runs the gateway and workers with SBX_STORE set to it.
find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE)
  foreach(it api isolation longpoll durability limits key_cache revoke_streams secrets)
    add_test(NAME it.pg.gateway.${it}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${NODE_EXECUTABLE} --test
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway/${it}.test.mjs)
    set_tests_properties(it.pg.gateway.${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_NOTIFY_BIN=$<TARGET_FILE:sbx-test-notify>"
      TIMEOUT 180)
  endforeach()
  foreach(it lifecycle faults)
    add_test(NAME it.pg.worker.fork_${it}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${NODE_EXECUTABLE} --test
                     --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/fork_${it}.test.mjs)
    set_tests_properties(it.pg.worker.fork_${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>"
      TIMEOUT 300)
  endforeach()
  if(TARGET sbx-worker AND TARGET sbx-echo-agent)
    add_test(NAME it.pg.worker.process_e2e
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh
                     ${NODE_EXECUTABLE} --test --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/process_e2e.test.mjs)
    set_tests_properties(it.pg.worker.process_e2e PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
      TIMEOUT 300)
  endif()
endif()

# The contract test (responses validated against openapi.yaml through the generated client) with
# its gateways and worker on PostgreSQL.
if(TARGET sbx-gateway AND SBX_NODE AND SBX_NPM)
  add_test(NAME it.pg.contract.api
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${CMAKE_COMMAND} -E env
                   SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>
                   SBX_OPENAPI=${CMAKE_SOURCE_DIR}/openapi.yaml
                   "SBX_WORKER_BIN=$<$<TARGET_EXISTS:sbx-worker-fork>:$<TARGET_FILE:sbx-worker-fork>>"
                   sh -c "'${SBX_NODE}' node_modules/typescript/bin/tsc -p tsconfig.json && '${SBX_NODE}' --test dist/src/contract.test.js"
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests/contract)
  set_tests_properties(it.pg.contract.api PROPERTIES FIXTURES_REQUIRED "contract_node_modules;contract_types"
                       TIMEOUT 180 RESOURCE_LOCK contract_dist)
endif()

# The store's unit tests again, on PostgreSQL: the same binaries as unit.store.api,
# unit.store.queue, unit.store.hosts and unit.store.quotas, whose fixture
# (tests/unit/store_fixture.c) gives each test a fresh database of the throwaway cluster when
# SBX_TEST_PG_URL is set.
foreach(name api queue hosts quotas)
  add_test(NAME unit.store.pg.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_store_${name}>)
  set_tests_properties(unit.store.pg.${name} PROPERTIES TIMEOUT 180)
endforeach()

sbx_test_labels(root it.pg.worker.process_e2e)
# The queue's and the API's store tests on PostgreSQL: about a minute and more on a busy machine.
sbx_test_labels(slow unit.store.pg.queue unit.store.pg.api)
