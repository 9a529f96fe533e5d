# Contract tests: openapi.yaml is linted (Redocly's lint engine, tests/contract/lint.mjs), a typed
# client is generated from it (openapi-typescript), the contract test is type-checked against that
# client (tsc --noEmit) and then drives a live sbx-gateway through it (openapi-fetch), validating
# every response against the spec (Ajv). npm ci installs the pinned toolchain from
# tests/contract/package-lock.json, from npm's local cache where the packages are in it.
set(contract_dir ${CMAKE_SOURCE_DIR}/tests/contract)
find_program(SBX_NODE node)
find_program(SBX_NPM npm)

if(NOT SBX_NODE OR NOT SBX_NPM)
  # Without Node there is nothing to run the toolchain with: report a skip (77), not a pass.
  add_test(NAME it.contract.skipped
           COMMAND sh -c "echo 'contract tests skipped: node and npm are required (apt-get install nodejs npm)'; exit 77")
  set_tests_properties(it.contract.skipped PROPERTIES SKIP_RETURN_CODE 77)
  return()
endif()

add_test(NAME it.contract.npm_ci
         COMMAND ${SBX_NPM} ci --prefer-offline --no-audit --no-fund --loglevel=error
         WORKING_DIRECTORY ${contract_dir})
set_tests_properties(it.contract.npm_ci PROPERTIES FIXTURES_SETUP contract_node_modules TIMEOUT 600)

add_test(NAME it.contract.lint
         COMMAND ${SBX_NODE} lint.mjs ${CMAKE_SOURCE_DIR}/openapi.yaml
         WORKING_DIRECTORY ${contract_dir})
# No telemetry: tests make no network requests.
set_tests_properties(it.contract.lint PROPERTIES FIXTURES_REQUIRED contract_node_modules TIMEOUT 120
                     ENVIRONMENT "REDOCLY_TELEMETRY=off")

add_test(NAME it.contract.generate
         COMMAND ${SBX_NODE} node_modules/openapi-typescript/bin/cli.js ${CMAKE_SOURCE_DIR}/openapi.yaml
                 --default-non-nullable false --output generated/schema.d.ts
         WORKING_DIRECTORY ${contract_dir})
set_tests_properties(it.contract.generate PROPERTIES FIXTURES_REQUIRED contract_node_modules
                     FIXTURES_SETUP contract_types TIMEOUT 120)

add_test(NAME it.contract.typecheck
         COMMAND ${SBX_NODE} node_modules/typescript/bin/tsc --noEmit -p tsconfig.json
         WORKING_DIRECTORY ${contract_dir})
set_tests_properties(it.contract.typecheck PROPERTIES FIXTURES_REQUIRED "contract_node_modules;contract_types"
                     TIMEOUT 120)

if(TARGET sbx-gateway)
  add_test(NAME it.contract.api
           COMMAND ${CMAKE_COMMAND} -E env SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>
                   SBX_OPENAPI=${CMAKE_SOURCE_DIR}/openapi.yaml
                   # The worker with its fork test driver (tests/worker.cmake, when present)
                   # lets the test see replies, failures and Sandboxes a real worker writes.
                   "SBX_WORKER_BIN=$<$<TARGET_EXISTS:sbx-worker-fork>:$<TARGET_FILE:sbx-worker-fork>>"
                   sh -c "'${SBX_NODE}' node_modules/typescript/bin/tsc -p tsconfig.json && '${SBX_NODE}' --test dist/src/contract.test.js"
           WORKING_DIRECTORY ${contract_dir})
  set_tests_properties(it.contract.api PROPERTIES FIXTURES_REQUIRED "contract_node_modules;contract_types"
                       TIMEOUT 180 RESOURCE_LOCK contract_dist)
  # The generated client against an HTTPS gateway: a throwaway CA and certificate (openssl), the
  # CA trusted through NODE_EXTRA_CA_CERTS, which fetch reads at start only.
  find_program(SBX_OPENSSL openssl)
  if(SBX_OPENSSL)
    add_test(NAME it.contract.https
             COMMAND ${CMAKE_COMMAND} -E env SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>
                     SBX_OPENAPI=${CMAKE_SOURCE_DIR}/openapi.yaml
                     sh -c "d=$(mktemp -d) && '${CMAKE_SOURCE_DIR}/tests/integration/gateway/make_test_certs.sh' \"$d\" gateway && '${SBX_NODE}' node_modules/typescript/bin/tsc -p tsconfig.json && NODE_EXTRA_CA_CERTS=\"$d/ca.pem\" SBX_TEST_TLS_DIR=\"$d\" '${SBX_NODE}' --test dist/src/https.test.js; r=$?; rm -rf \"$d\"; exit $r"
             WORKING_DIRECTORY ${contract_dir})
    set_tests_properties(it.contract.https PROPERTIES
                         FIXTURES_REQUIRED "contract_node_modules;contract_types" TIMEOUT 120
                         RESOURCE_LOCK contract_dist)
  endif()
endif()

# npm ci, and tsc before each run against a live gateway.
sbx_test_labels(slow it.contract.npm_ci it.contract.api it.contract.https)
