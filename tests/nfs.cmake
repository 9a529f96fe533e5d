# NFS Workspaces for microVM Sandboxes (issue 6): sbx's own nfs-ganesha export, the firewall's
# TCP 2049 element and the guest agent's mount, with real TCG guests (two VMs: about 30 s here).
if(TARGET guest-image)
  add_executable(test_nfs_driver ${CMAKE_CURRENT_LIST_DIR}/integration/nfs/test_nfs_driver.c)
  target_link_libraries(test_nfs_driver PRIVATE sbxworker sbx_test_support)
  add_test(NAME it.nfs.qemu_workspace
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_nfs_driver>
                   ${CMAKE_BINARY_DIR}/guest)
  # Exit 77 (no root) is a skip. In a network namespace of its own: ganesha's TCP 2049, the taps
  # and the firewall table are the test's alone.
  set_tests_properties(it.nfs.qemu_workspace PROPERTIES FIXTURES_REQUIRED guest_image
                       TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

# End to end: gateway + sbx-worker + qemu driver + NFS (two VMs), through the worker tests' harness.
find_program(NODE_EXECUTABLE node)
if(TARGET guest-image AND NODE_EXECUTABLE AND TARGET sbx-worker AND TARGET sbx-gateway)
  add_test(NAME it.nfs.qemu_e2e
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test
                   --test-concurrency=1 ${CMAKE_CURRENT_LIST_DIR}/integration/nfs/nfs_e2e.test.mjs)
  set_tests_properties(it.nfs.qemu_e2e PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
    FIXTURES_REQUIRED guest_image TIMEOUT 300)
endif()

# nfs_export alone against a real ganesha (no VMs): exports in the config, reconciliation.
add_executable(test_nfs_export ${CMAKE_CURRENT_LIST_DIR}/integration/nfs/test_nfs_export.c)
target_link_libraries(test_nfs_export PRIVATE sbxworker)
add_test(NAME it.nfs.export_reconcile
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_nfs_export>)
set_tests_properties(it.nfs.export_reconcile PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)

sbx_test_labels(root it.nfs.qemu_workspace it.nfs.qemu_e2e it.nfs.export_reconcile)
sbx_test_labels(qemu it.nfs.qemu_workspace it.nfs.qemu_e2e)
# One nfs-ganesha at a time: each test's server is in its own network namespace and data
# directory, but ganesha.nfsd is not known to be safe beside another on one host (its D-Bus name).
sbx_test_locks(nfs_ganesha it.nfs.qemu_workspace it.nfs.qemu_e2e it.nfs.export_reconcile)
