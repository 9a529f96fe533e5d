# The process driver's default rootfs: <build>/rootfs and <build>/rootfs.sha256, rebuilt when the
# agents or the builder change. Built by default (ALL) because the worker's default config uses it.
set(SBX_ROOTFS_DIR ${CMAKE_BINARY_DIR}/rootfs)
add_custom_command(
  OUTPUT ${SBX_ROOTFS_DIR}.sha256
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/build-rootfs ${SBX_ROOTFS_DIR} $<TARGET_FILE:sbx-agent>
          $<TARGET_FILE:sbx-echo-agent>
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/build-rootfs sbx-agent sbx-echo-agent
  COMMENT "Building the default Sandbox rootfs from busybox-static"
  VERBATIM)
add_custom_target(rootfs ALL DEPENDS ${SBX_ROOTFS_DIR}.sha256)
