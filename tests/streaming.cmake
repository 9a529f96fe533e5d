# Streaming: an agent's partial output (the store's chunks on both engines), the message stream and
# the live event feed over Server-Sent Events, end to end on the real gateway, worker and process
# driver.
add_executable(test_store_chunks ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_chunks.c
                                 ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_link_libraries(test_store_chunks PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.store.chunks COMMAND test_store_chunks)
add_test(NAME unit.store.pg.chunks
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_store_chunks>)
set_tests_properties(unit.store.pg.chunks PROPERTIES TIMEOUT 180)

# Webhooks below HTTP: signatures, the URL policy, the store's outbox (both engines).
add_executable(test_webhooks ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_webhooks.c
                             ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_link_libraries(test_webhooks PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.common.webhooks COMMAND test_webhooks)
add_test(NAME unit.common.pg.webhooks COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_webhooks>)
set_tests_properties(unit.common.pg.webhooks PROPERTIES TIMEOUT 180)

find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE AND TARGET sbx-worker)
  foreach(it stream feed)
    add_test(NAME it.streaming.${it}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/streaming/${it}.test.mjs)
    set_tests_properties(it.streaming.${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
      TIMEOUT 300)
  endforeach()
  # Webhooks on the worker's own code with its fork test driver (tests/worker.cmake builds
  # sbx-worker-fork; webhooks need no Sandbox).
  add_test(NAME it.streaming.webhooks
           COMMAND ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/streaming/webhooks.test.mjs)
  set_tests_properties(it.streaming.webhooks PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>"
    TIMEOUT 300)
  # 1,000 streams beside 1,000 long polls on the gateway alone (no worker, no Sandbox).
  add_test(NAME it.streaming.scale
           COMMAND ${NODE_EXECUTABLE} --test ${CMAKE_CURRENT_SOURCE_DIR}/integration/streaming/scale.test.mjs)
  set_tests_properties(it.streaming.scale PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_NOTIFY_BIN=$<TARGET_FILE:sbx-test-notify>"
    TIMEOUT 300)
endif()

# The same on PostgreSQL (wake-ups by LISTEN/NOTIFY), under a throwaway cluster of their own.
if(NODE_EXECUTABLE AND TARGET sbx-worker)
  add_test(NAME it.pg.streaming.stream
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh
                   ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/streaming/stream.test.mjs)
  set_tests_properties(it.pg.streaming.stream PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
    TIMEOUT 300)
  foreach(it feed webhooks)
    add_test(NAME it.pg.streaming.${it}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/streaming/${it}.test.mjs)
    set_tests_properties(it.pg.streaming.${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>"
      TIMEOUT 300)
  endforeach()
endif()

# One App's hanging or dripping webhook endpoints do not hold up another App's deliveries.
if(NODE_EXECUTABLE AND TARGET sbx-worker)
  add_test(NAME it.streaming.webhook_isolation
           COMMAND ${NODE_EXECUTABLE} --test ${CMAKE_CURRENT_SOURCE_DIR}/integration/streaming/webhook_isolation.test.mjs)
  set_tests_properties(it.streaming.webhook_isolation PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>"
    TIMEOUT 180)
endif()

sbx_test_labels(root it.streaming.stream it.streaming.feed it.pg.streaming.stream)
