# microVM tests (issue 4): real qemu -M microvm guests under TCG. Few and sized for 2 cores: the
# guest image is built once per ctest run by the guest_image fixture (cached in <build>/guest).
if(TARGET guest-image)
  # Builds the image and checks it (vmlinux an ELF x86-64 executable, the hash over all parts).
  add_test(NAME it.microvm.guest_image
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/integration/microvm/guest_image_test.sh
                   ${CMAKE_BINARY_DIR})
  set_tests_properties(it.microvm.guest_image PROPERTIES FIXTURES_SETUP guest_image TIMEOUT 300)

  add_executable(test_qemu_driver ${CMAKE_CURRENT_LIST_DIR}/integration/microvm/test_qemu_driver.c)
  target_link_libraries(test_qemu_driver PRIVATE sbxworker sbx_test_support)
  add_test(NAME it.microvm.qemu_driver
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_qemu_driver>
                   ${CMAKE_BINARY_DIR}/guest)
  set_tests_properties(it.microvm.qemu_driver PROPERTIES FIXTURES_REQUIRED guest_image TIMEOUT 180)
  add_test(NAME it.microvm.qemu_reap
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_qemu_driver>
                   ${CMAKE_BINARY_DIR}/guest reap)
  set_tests_properties(it.microvm.qemu_reap PROPERTIES FIXTURES_REQUIRED guest_image TIMEOUT 180)
  add_test(NAME it.microvm.qemu_bad_kernel
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_qemu_driver>
                   ${CMAKE_BINARY_DIR}/guest bad_kernel)
  set_tests_properties(it.microvm.qemu_bad_kernel PROPERTIES FIXTURES_REQUIRED guest_image
                       TIMEOUT 120)
endif()

# End to end (issue 4): gateway + sbx-worker + the qemu driver, through the worker tests' harness.
find_program(NODE_EXECUTABLE node)
if(TARGET guest-image AND NODE_EXECUTABLE AND TARGET sbx-worker AND TARGET sbx-gateway)
  add_test(NAME it.microvm.qemu_e2e
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test
                   --test-concurrency=1 ${CMAKE_CURRENT_LIST_DIR}/integration/microvm/qemu_e2e.test.mjs)
  set_tests_properties(it.microvm.qemu_e2e PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
    FIXTURES_REQUIRED guest_image TIMEOUT 300)
endif()

# Egress in a microVM (issue 15): the guest's resolv.conf from sbx.dns=, DNS and the firewall's
# rules from a real TCG guest; a world namespace of its own, hence --mount too.
if(TARGET guest-image AND NODE_EXECUTABLE AND TARGET sbx-worker AND TARGET sbx-gateway)
  add_test(NAME it.microvm.qemu_egress
           COMMAND unshare --net --mount -- ${NODE_EXECUTABLE} --test --test-concurrency=1
                   ${CMAKE_CURRENT_LIST_DIR}/integration/microvm/qemu_egress.test.mjs)
  set_tests_properties(it.microvm.qemu_egress PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>;SBX_NET_PROBE=$<TARGET_FILE:net_probe>;SBX_EGRESS_WORLD=${CMAKE_CURRENT_LIST_DIR}/integration/network/egress_world.sh"
    FIXTURES_REQUIRED guest_image TIMEOUT 300)
endif()

sbx_test_labels(root it.microvm.qemu_driver it.microvm.qemu_reap it.microvm.qemu_bad_kernel
                it.microvm.qemu_e2e it.microvm.qemu_egress)
sbx_test_labels(qemu it.microvm.guest_image it.microvm.qemu_driver it.microvm.qemu_reap
                it.microvm.qemu_bad_kernel it.microvm.qemu_e2e it.microvm.qemu_egress)
