# Booting App images (issue 14): Sandboxes of the process and qemu drivers whose root is an image
# of the per-host cache (worker/images/image_cache.h). The images (Debian 12 + python3, unpacked
# from layer 1 of the fixture test_images, and a tiny busybox one) are built once into
# <build>/boot-images by the fixture images_boot (cached there between runs); the tests need root.
# tests/images.cmake, included before this file, defines SBX_TEST_IMAGES_DIR and test_images.
set(images_test_dir ${CMAKE_CURRENT_LIST_DIR}/integration/images)
set(images_test_out ${CMAKE_BINARY_DIR}/boot-images)
add_test(NAME it.images.boot_fixture
         COMMAND ${images_test_dir}/build-boot-images.sh ${images_test_out} ${CMAKE_BINARY_DIR}/rootfs
                 ${SBX_TEST_IMAGES_DIR})
set_tests_properties(it.images.boot_fixture PROPERTIES FIXTURES_SETUP images_boot
                                                       FIXTURES_REQUIRED test_images TIMEOUT 600)

add_executable(test_image_boot ${images_test_dir}/test_image_boot.c)
target_link_libraries(test_image_boot PRIVATE sbxworker sbx_test_support PkgConfig::JANSSON)
target_compile_definitions(test_image_boot PRIVATE SBX_BUILD_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(test_image_boot rootfs)
add_test(NAME it.images.boot_process
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_image_boot>
                 ${images_test_out}/images.env process)
set_tests_properties(it.images.boot_process PROPERTIES FIXTURES_REQUIRED images_boot TIMEOUT 120
                                                       SKIP_RETURN_CODE 77)
if(TARGET guest-image)
  add_test(NAME it.images.boot_qemu
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_image_boot>
                   ${images_test_out}/images.env qemu ${CMAKE_BINARY_DIR}/guest)
  set_tests_properties(it.images.boot_qemu PROPERTIES FIXTURES_REQUIRED "images_boot;guest_image"
                                                      TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

# The image's part of the start line (env, cwd, user) in sbx-agent: the user lookup in an image
# tree, and the real agent binary running the echo agent.
# image_user.c is built in directly: sbxrelay's JSON reader has jansson's function names.
add_executable(test_image_user ${CMAKE_CURRENT_LIST_DIR}/unit/test_image_user.c
                               ${CMAKE_SOURCE_DIR}/agent/image_user.c)
target_include_directories(test_image_user PRIVATE ${CMAKE_SOURCE_DIR}/agent)
target_link_libraries(test_image_user PRIVATE PkgConfig::CMOCKA PkgConfig::JANSSON)
target_compile_definitions(test_image_user PRIVATE SBX_AGENT_BIN="$<TARGET_FILE:sbx-agent>"
                                                   SBX_ECHO_AGENT_BIN="$<TARGET_FILE:sbx-echo-agent>")
add_dependencies(test_image_user sbx-agent sbx-echo-agent)
add_test(NAME unit.agent.image_user COMMAND test_image_user)

# tools/bench/image_boot.c: cold and warm activation of the Python image beside the built-in one
# (process and qemu; `tools/sbx bench` runs it). A one-run smoke test keeps it working; it asserts
# nothing about speed.
add_executable(sbx-bench-image-boot ${CMAKE_SOURCE_DIR}/tools/bench/image_boot.c)
target_link_libraries(sbx-bench-image-boot PRIVATE sbxworker)
set_target_properties(sbx-bench-image-boot PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                      ${CMAKE_BINARY_DIR}/tools/bench)
add_dependencies(sbx-bench-image-boot rootfs)
add_test(NAME it.images.bench_runs
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:sbx-bench-image-boot>
                 ${images_test_out}/images.env ${CMAKE_BINARY_DIR}/guest --runs 1 --process-only)
set_tests_properties(it.images.bench_runs PROPERTIES FIXTURES_REQUIRED images_boot TIMEOUT 120)

# End to end once the Images resource is in the tree (images-import: tests/images.cmake, included
# before this file, defines SBX_TEST_IMAGES_DIR and the fixture test_images): an uploaded image,
# imported by the worker, answers a Session's message under the process and qemu drivers.
find_program(NODE_EXECUTABLE node)
if(DEFINED SBX_TEST_IMAGES_DIR AND NODE_EXECUTABLE AND TARGET sbx-worker AND TARGET sbx-gateway)
  add_test(NAME it.images.boot_e2e
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test
                   ${images_test_dir}/boot_e2e.test.mjs)
  set(boot_e2e_fixtures test_images)
  if(TARGET guest-image)
    list(APPEND boot_e2e_fixtures guest_image)
  endif()
  set_tests_properties(it.images.boot_e2e PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_TEST_IMAGES=${SBX_TEST_IMAGES_DIR};SBX_GUEST_DIR=${CMAKE_BINARY_DIR}/guest"
    FIXTURES_REQUIRED "${boot_e2e_fixtures}" TIMEOUT 420)
endif()

sbx_test_labels(root it.images.boot_fixture it.images.boot_process it.images.boot_qemu
                it.images.bench_runs it.images.boot_e2e)
sbx_test_labels(qemu it.images.boot_qemu it.images.boot_e2e)

