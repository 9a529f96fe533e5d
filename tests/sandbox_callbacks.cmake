# The Sandbox callback API end to end (tests/integration/callbacks): a Python agent in the Debian +
# python3 test image (fixture test_images of tests/images.cmake, hence this file's name sorting
# after it) calls the API of its own Sandbox over HTTPS on the real gateway and sbx-worker, and
# the identity tokens it gets are verified with jose against the gateway's published keys. jose is
# pinned in tests/integration/callbacks/package-lock.json (npm ci: fixture callbacks_node_modules).
# Each test runs in a network namespace of its own: the worker's callback server takes
# 0.0.0.0:443 there.
find_program(NODE_EXECUTABLE node)
find_program(SBX_NPM npm)
set(callbacks_dir ${CMAKE_CURRENT_LIST_DIR}/integration/callbacks)
if(DEFINED SBX_TEST_IMAGES_DIR AND NODE_EXECUTABLE AND SBX_NPM AND TARGET sbx-worker
   AND TARGET sbx-gateway)
  add_test(NAME it.callbacks.npm_ci
           COMMAND ${SBX_NPM} ci --prefer-offline --no-audit --no-fund --loglevel=error
           WORKING_DIRECTORY ${callbacks_dir})
  set_tests_properties(it.callbacks.npm_ci PROPERTIES FIXTURES_SETUP callbacks_node_modules
                                                      TIMEOUT 600)
  set(callbacks_env "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR}")
  set(callbacks_run ${NODE_EXECUTABLE} --test --test-concurrency=1 ${callbacks_dir}/callbacks.test.mjs)

  # Everything on the process driver: context, Session, metadata across Sandboxes, history,
  # sibling messages and their Idempotency-Key, another App's Session, tokens of other and ended
  # Sandboxes, identity tokens, 401 and 413.
  add_test(NAME it.callbacks.process COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${callbacks_run})
  set_tests_properties(it.callbacks.process PROPERTIES
    ENVIRONMENT "${callbacks_env};SBX_CB_DRIVER=process"
    FIXTURES_REQUIRED "test_images;callbacks_node_modules" TIMEOUT 600)

  # The same on PostgreSQL (a throwaway cluster; gateway and worker are separate processes).
  add_test(NAME it.pg.callbacks.process
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/pg-run.sh ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh
                   ${callbacks_run})
  set_tests_properties(it.pg.callbacks.process PROPERTIES
    ENVIRONMENT "${callbacks_env};SBX_CB_DRIVER=process"
    FIXTURES_REQUIRED "test_images;callbacks_node_modules" TIMEOUT 600)

  # One activation of a qemu guest (TCG) and the essentials: the guest reaches the host's
  # callback server through its tap with the CA it was given.
  if(TARGET guest-image)
    add_test(NAME it.callbacks.qemu COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${callbacks_run})
    set_tests_properties(it.callbacks.qemu PROPERTIES
      ENVIRONMENT "${callbacks_env};SBX_CB_DRIVER=qemu;SBX_GUEST_DIR=${CMAKE_BINARY_DIR}/guest"
      FIXTURES_REQUIRED "test_images;callbacks_node_modules;guest_image" TIMEOUT 600)
  endif()
endif()

sbx_test_labels(root it.callbacks.process it.pg.callbacks.process it.callbacks.qemu)
sbx_test_labels(qemu it.callbacks.qemu)
