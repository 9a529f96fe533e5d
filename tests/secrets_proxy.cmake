# The brokering egress proxy of App secrets end to end (tests/integration/secrets): a Python agent in
# the Debian + python3 test image (fixture test_images of tests/images.cmake, hence this file's
# name sorting after it) calls a TLS model API in a world namespace through the real gateway,
# sbx-worker, process driver, firewall redirect and proxy. In a network and mount namespace of its
# own (the world's name lives on a tmpfs over /run/netns there).
find_program(NODE_EXECUTABLE node)
if(DEFINED SBX_TEST_IMAGES_DIR AND NODE_EXECUTABLE AND TARGET sbx-worker AND TARGET sbx-gateway)
  add_test(NAME it.secrets.proxy
           COMMAND unshare --net --mount -- ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_LIST_DIR}/integration/secrets/secrets_proxy.test.mjs)
  set_tests_properties(it.secrets.proxy PROPERTIES
    FIXTURES_REQUIRED test_images
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR}"
    TIMEOUT 300)
  # One activation of a qemu guest (TCG) and the essentials: the guest's HTTPS through its tap
  # reaches the same proxy by the same firewall map.
  if(TARGET guest-image)
    add_test(NAME it.secrets.proxy_qemu
             COMMAND unshare --net --mount -- ${NODE_EXECUTABLE} --test --test-concurrency=1
                     ${CMAKE_CURRENT_LIST_DIR}/integration/secrets/secrets_proxy.test.mjs)
    set_tests_properties(it.secrets.proxy_qemu PROPERTIES
      FIXTURES_REQUIRED "test_images;guest_image"
      ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR};SBX_SECRETS_DRIVER=qemu;SBX_GUEST_DIR=${CMAKE_BINARY_DIR}/guest"
      TIMEOUT 600)
  endif()
endif()
sbx_test_labels(root it.secrets.proxy it.secrets.proxy_qemu)
sbx_test_labels(qemu it.secrets.proxy_qemu)
