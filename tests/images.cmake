# Images (issue 14): the importer on archives the test writes (cmocka, as root), and the test image
# builder's cache (tests/images/build-test-images.sh) for the live tests.
add_executable(test_image_import ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_image_import.c)
target_link_libraries(test_image_import PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.images.import COMMAND test_image_import)
set_tests_properties(unit.worker.images.import PROPERTIES SKIP_RETURN_CODE 77)

# The store's Images on SQLite, and on PostgreSQL under pg-run.sh.
add_executable(test_store_images ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_images.c
                                 ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_link_libraries(test_store_images PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.store.images COMMAND test_store_images)
add_test(NAME unit.store.pg.images COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh
                                           $<TARGET_FILE:test_store_images>)
set_tests_properties(unit.store.pg.images PROPERTIES TIMEOUT 180)

# The Debian 12 + python3 test image in both archive formats, built once per build tree (about 45 s
# the first time; cached in <build>/image-archives after, apart from the boot tests'
# <build>/test-images). Other areas' tests may require the fixture test_images too.
set(SBX_TEST_IMAGES_DIR ${CMAKE_BINARY_DIR}/image-archives)
add_test(NAME it.images.build COMMAND ${CMAKE_CURRENT_LIST_DIR}/images/build-test-images.sh
                                      ${SBX_TEST_IMAGES_DIR})
set_tests_properties(it.images.build PROPERTIES FIXTURES_SETUP test_images TIMEOUT 600)

find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE AND TARGET sbx-worker AND TARGET sbxctl)
  add_test(NAME it.images.import
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_LIST_DIR}/integration/images/images.test.mjs)
  set_tests_properties(it.images.import PROPERTIES
    FIXTURES_REQUIRED test_images
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBXCTL_BIN=$<TARGET_FILE:sbxctl>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR}"
    TIMEOUT 600)
endif()

# End to end: a Session of an App on an uploaded image answers from the image's userspace. Needs
# the process driver's image boot (worker/drivers/process_image.c, the boot side of issue 14):
# registered once that is part of the tree.
if(NODE_EXECUTABLE AND TARGET sbx-worker AND EXISTS ${CMAKE_SOURCE_DIR}/worker/drivers/process_image.c)
  add_test(NAME it.images.session
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_LIST_DIR}/integration/images/session.test.mjs)
  set_tests_properties(it.images.session PROPERTIES
    FIXTURES_REQUIRED test_images
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR}"
    TIMEOUT 600)
endif()

# image_cache_limit: least recently used first, never what an App names or a live Sandbox runs,
# and what an App that wants an evicted image again gets (tests/integration/images/evict.test.mjs).
# Same guard as it.images.session: Sessions boot the images on the process driver.
if(NODE_EXECUTABLE AND TARGET sbx-worker AND EXISTS ${CMAKE_SOURCE_DIR}/worker/drivers/process_image.c)
  add_test(NAME it.images.evict
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_LIST_DIR}/integration/images/evict.test.mjs)
  set_tests_properties(it.images.evict PROPERTIES
    FIXTURES_REQUIRED test_images
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR};SBX_DEFAULT_ROOTFS=${CMAKE_BINARY_DIR}/rootfs"
    TIMEOUT 600)
endif()

# Issue 15's "done when" on an image: a Python agent in the test image, of an allowlist App,
# reaches only its allowed name and each refusal is an event. The egress world of
# tests/integration/network/egress_world.sh is a named namespace (hence --mount: its name lives on a
# tmpfs over /run/netns in that mount namespace, so it.worker.egress_e2e's world is another one).
# net_probe comes from tests/network.cmake.
if(NODE_EXECUTABLE AND TARGET sbx-worker AND EXISTS ${CMAKE_SOURCE_DIR}/worker/drivers/process_image.c)
  add_test(NAME it.images.egress_python
           COMMAND unshare --net --mount -- ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_LIST_DIR}/integration/images/egress_python.test.mjs)
  set_tests_properties(it.images.egress_python PROPERTIES
    FIXTURES_REQUIRED test_images
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR};SBX_NET_PROBE=$<TARGET_FILE:net_probe>;SBX_EGRESS_WORLD=${CMAKE_CURRENT_LIST_DIR}/integration/network/egress_world.sh"
    TIMEOUT 300)
endif()

# The writable root of an image Sandbox counts against memSizeMib: filling / past it ends in
# sandbox-oom and a fresh Sandbox, while another App is served (issue 16's "filling the root" row).
if(NODE_EXECUTABLE AND TARGET sbx-worker AND EXISTS ${CMAKE_SOURCE_DIR}/worker/drivers/process_image.c)
  add_test(NAME it.images.root_fill
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_LIST_DIR}/integration/images/root_fill.test.mjs)
  set_tests_properties(it.images.root_fill PROPERTIES
    FIXTURES_REQUIRED test_images
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR}"
    TIMEOUT 300)
endif()

sbx_test_labels(root unit.worker.images.import it.images.build it.images.import it.images.session
                it.images.evict it.images.egress_python it.images.root_fill)

# Building the image archives (mmdebstrap, the first time) and booting them: minutes.
sbx_test_labels(slow it.images.build it.images.session)
