# The worker area: the queue side of the store (cmocka) and live end-to-end tests of the gateway,
# the workers and the process driver.
add_executable(test_store_queue ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_queue.c
                                ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_link_libraries(test_store_queue PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE
                                               Threads::Threads)
add_test(NAME unit.store.queue COMMAND test_store_queue)

# The queue's per-poll and per-claim statements search messages by an index (SQLite plans).
add_executable(test_store_plans ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_plans.c)
target_include_directories(test_store_plans PRIVATE ${CMAKE_SOURCE_DIR}/common/store/sql)
target_link_libraries(test_store_plans PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.store.plans COMMAND test_store_plans)

add_executable(test_backoff ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_backoff.c)
target_link_libraries(test_backoff PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.delivery.backoff COMMAND test_backoff)

# Every #include between worker/'s folders goes down its layers (docs/worker.md).
add_test(NAME unit.worker.layers
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/check_worker_layers.sh ${CMAKE_SOURCE_DIR}/worker)

# A Sandbox's state changes only along sandbox.h's transition table (sandbox_set_state).
add_executable(test_sandbox_state ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sandbox_state.c)
target_link_libraries(test_sandbox_state PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.sandbox.state COMMAND test_sandbox_state)

add_executable(test_driver_shared ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_driver_shared.c)
target_link_libraries(test_driver_shared PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.drivers.shared COMMAND test_driver_shared)

# sbx-worker-fork: the worker with a fork() test-double driver (no isolation), to test the
# lifecycle logic on its own.
add_executable(sbx-worker-fork ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/fork_worker.c)
target_link_libraries(sbx-worker-fork PRIVATE sbxworker)

find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE)
  foreach(it lifecycle faults scale)
    add_test(NAME it.worker.fork_${it}
             COMMAND ${NODE_EXECUTABLE} --test --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/fork_${it}.test.mjs)
    set_tests_properties(it.worker.fork_${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>"
      TIMEOUT 300)
  endforeach()
endif()

# End to end on the real process driver and echo agent (once the process driver's area is built).
if(NODE_EXECUTABLE AND TARGET sbx-echo-agent AND TARGET sbx-worker)
  foreach(it e2e faults scale secrets fair drivers)
    add_test(NAME it.worker.process_${it}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                     ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/process_${it}.test.mjs)
    set_tests_properties(it.worker.process_${it} PROPERTIES
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
      TIMEOUT 300)
  endforeach()
endif()

# VMM log caps (worker/host/log_cap.c): a flood into a watched log stays at its cap, rotated.
add_executable(test_log_cap ${CMAKE_CURRENT_LIST_DIR}/unit/test_log_cap.c)
target_link_libraries(test_log_cap PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.host.log_cap COMMAND test_log_cap)
# Per-App egress policies end to end (issue 15): a world namespace of its own, hence --mount too.
if(NODE_EXECUTABLE AND TARGET rootfs)
  add_test(NAME it.worker.egress_e2e
           COMMAND unshare --net --mount -- ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/egress_e2e.test.mjs)
  set_tests_properties(it.worker.egress_e2e PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_NET_PROBE=$<TARGET_FILE:net_probe>;SBX_SBXCTL_BIN=$<TARGET_FILE:sbxctl>;SBX_EGRESS_WORLD=${CMAKE_CURRENT_SOURCE_DIR}/integration/network/egress_world.sh"
    TIMEOUT 180)
endif()

# tools/bench/burst_client.c: the burst scenario's load generator (one thread, poll(), a
# connection per Session). A short run against the fork worker keeps it working; it asserts
# nothing about speed.
add_executable(sbx-bench-burst ${CMAKE_SOURCE_DIR}/tools/bench/burst_client.c)
set_target_properties(sbx-bench-burst PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                 ${CMAKE_BINARY_DIR}/tools/bench)
if(NODE_EXECUTABLE AND TARGET sbx-worker-fork)
  add_test(NAME it.worker.bench_burst_runs
           COMMAND ${NODE_EXECUTABLE} --test
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/bench_burst.test.mjs)
  set_tests_properties(it.worker.bench_burst_runs PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker-fork>;SBX_BENCH_BURST_BIN=$<TARGET_FILE:sbx-bench-burst>"
    TIMEOUT 120)
endif()

# Narrowing an App's egress ends its Sandboxes' established connections (same world as above).
if(NODE_EXECUTABLE AND TARGET rootfs)
  add_test(NAME it.worker.egress_established
           COMMAND unshare --net --mount -- ${NODE_EXECUTABLE} --test
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/egress_established.test.mjs)
  set_tests_properties(it.worker.egress_established PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_NET_PROBE=$<TARGET_FILE:net_probe>;SBX_EGRESS_WORLD=${CMAKE_CURRENT_SOURCE_DIR}/integration/network/egress_world.sh"
    TIMEOUT 180)
endif()

# Pre-started agents on the process driver: context line, Workspace first, retirement, readiness.
if(NODE_EXECUTABLE AND TARGET sbx-echo-agent AND TARGET sbx-worker)
  add_test(NAME it.worker.prestart
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/worker/prestart.test.mjs)
  set_tests_properties(it.worker.prestart PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
    TIMEOUT 300)
endif()

sbx_test_labels(root it.worker.process_e2e it.worker.process_faults it.worker.process_scale
                it.worker.process_secrets it.worker.process_fair it.worker.process_drivers
                it.worker.egress_e2e it.worker.egress_established it.worker.prestart)
