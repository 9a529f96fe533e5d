# Reliability and security proofs (tests/integration/reliability/): the auth matrix walked from
# openapi.yaml, faults under load (kill -9 of gateway and workers), disk full, hostile agents.
# The libFuzzer targets are in tests/fuzz.cmake.
# The route table against the spec, both ways, with each route's auth kind.
add_executable(test_routes_vs_spec ${CMAKE_CURRENT_SOURCE_DIR}/integration/reliability/routes_vs_spec.c)
target_link_libraries(test_routes_vs_spec PRIVATE sbxgateway)
add_test(NAME it.reliability.routes_vs_spec
         COMMAND test_routes_vs_spec ${CMAKE_SOURCE_DIR}/openapi.yaml)

# A misbehaving App command for the hostile-agent test: static and without sanitizers, because
# it runs inside a Sandbox (copied into the Session's Workspace).
if(COMMAND sbx_static_agent)
  sbx_static_agent(sbx-test-hostile-agent
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/reliability/hostile_agent.c)
endif()

find_program(NODE_EXECUTABLE node)
if(NOT NODE_EXECUTABLE)
  add_test(NAME it.reliability.skipped
           COMMAND sh -c "echo 'reliability tests skipped: node is required'; exit 77")
  set_tests_properties(it.reliability.skipped PROPERTIES SKIP_RETURN_CODE 77)
  return()
endif()

set(rel_dir ${CMAKE_CURRENT_SOURCE_DIR}/integration/reliability)
set(rel_env
    "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>"
    "SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
    "SBX_OPENAPI=${CMAKE_SOURCE_DIR}/openapi.yaml"
    "SBX_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
    "SBX_BUILD_DIR=${CMAKE_BINARY_DIR}"
    "SBX_HOSTILE_AGENT_BIN=$<TARGET_FILE:sbx-test-hostile-agent>")

add_test(NAME it.reliability.auth_matrix
         COMMAND ${NODE_EXECUTABLE} --test ${rel_dir}/auth_matrix.test.mjs)
set_tests_properties(it.reliability.auth_matrix PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 120)

# Faults under load on the real process driver (needs root for the Sandboxes).
add_test(NAME it.reliability.faults_under_load
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test ${rel_dir}/faults_under_load.test.mjs)
set_tests_properties(it.reliability.faults_under_load PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 200)

# Disk full on a small tmpfs (needs root to mount; exits 77 otherwise). Run with plain node so the
# file can report a skip.
add_test(NAME it.reliability.disk_full COMMAND ${NODE_EXECUTABLE} ${rel_dir}/disk_full.test.mjs)
set_tests_properties(it.reliability.disk_full PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 150
                                                        SKIP_RETURN_CODE 77)

# Hostile agents on the process driver (root: Sandboxes and Workspaces).
add_test(NAME it.reliability.hostile_agents
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test ${rel_dir}/hostile_agents.test.mjs)
set_tests_properties(it.reliability.hostile_agents PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 300)

# HTTP abuse beyond it.gateway.limits: idle and byte-at-a-time clients vs a normal client's
# latency; malformed chunked encoding and smuggling shapes.
add_test(NAME it.reliability.http_abuse
         COMMAND ${NODE_EXECUTABLE} --test ${rel_dir}/http_abuse.test.mjs)
set_tests_properties(it.reliability.http_abuse PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 120)

# SQLITE_BUSY and forced checkpoints under write load: no 500, no lost 202.
add_test(NAME it.reliability.busy_checkpoint
         COMMAND ${NODE_EXECUTABLE} --test ${rel_dir}/busy_checkpoint.test.mjs)
set_tests_properties(it.reliability.busy_checkpoint PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 120)

# Concurrent first starts: a gateway and two workers at once on 40 fresh data directories (in a
# network namespace of its own: the workers reconcile links at start). On PostgreSQL too, 10, each
# data directory with a fresh database.
add_test(NAME it.reliability.first_start
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test ${rel_dir}/first_start.test.mjs)
set_tests_properties(it.reliability.first_start PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 200)
add_test(NAME it.pg.reliability.first_start
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh
                 ${NODE_EXECUTABLE} --test ${rel_dir}/first_start.test.mjs)
set_tests_properties(it.pg.reliability.first_start PROPERTIES ENVIRONMENT "${rel_env};SBX_FIRST_START_ROUNDS=10"
                                                          TIMEOUT 200)

# What files and endpoints show: data directory and database modes, an App key's view of the
# pool, /metrics behind metrics_token and on metrics_listen.
add_test(NAME it.reliability.exposure COMMAND ${NODE_EXECUTABLE} --test ${rel_dir}/exposure.test.mjs)
set_tests_properties(it.reliability.exposure PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 120)

# The failed-auth limiter behind a load balancer: trusted_proxies and X-Forwarded-For, failures
# per presented key prefix.
add_test(NAME it.reliability.proxy_auth COMMAND ${NODE_EXECUTABLE} --test ${rel_dir}/proxy_auth.test.mjs)
set_tests_properties(it.reliability.proxy_auth PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 120)

# DELETE /v1/workspaces while the Session's Sandbox has not stopped (409), and the removal's
# handling of planted symlinks.
add_test(NAME it.reliability.workspace_delete COMMAND ${NODE_EXECUTABLE} --test ${rel_dir}/workspace_delete.test.mjs)
set_tests_properties(it.reliability.workspace_delete PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 120)

# Bounded answers: 200 messages of 1 MiB listed by four clients at once under a peak RSS bound
# (the gateway in a memory cgroup of its own where one can be made); connections per client.
add_test(NAME it.reliability.bounded_answers COMMAND ${NODE_EXECUTABLE} --test ${rel_dir}/bounded_answers.test.mjs)
set_tests_properties(it.reliability.bounded_answers PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 300)

# Two installations on one host (two data directories in one network namespace): restarting
# either's worker leaves the other's Sandbox links, firewall elements and Workspaces alone.
add_test(NAME it.reliability.two_installations
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test ${rel_dir}/two_installations.test.mjs)
set_tests_properties(it.reliability.two_installations PROPERTIES ENVIRONMENT "${rel_env}" TIMEOUT 240)

# The hostile-agent rows that apply to microVMs (VMM cgroup caps from an App's limits, console log
# caps) on real TCG guests; needs the guest image fixture (tests/microvm.cmake).
if(TARGET guest-image)
  add_test(NAME it.reliability.hostile_agents_qemu
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test
                   --test-concurrency=1 ${rel_dir}/hostile_agents_qemu.test.mjs)
  set_tests_properties(it.reliability.hostile_agents_qemu PROPERTIES ENVIRONMENT "${rel_env}"
                       FIXTURES_REQUIRED guest_image TIMEOUT 300)
endif()

sbx_test_labels(root it.reliability.faults_under_load it.reliability.disk_full
                it.reliability.hostile_agents it.reliability.first_start it.pg.reliability.first_start
                it.reliability.two_installations it.reliability.hostile_agents_qemu)
sbx_test_labels(qemu it.reliability.hostile_agents_qemu)
