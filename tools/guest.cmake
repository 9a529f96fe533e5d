# The guest image of the qemu and firecracker drivers (tools/build-guest-image): the `guest-image`
# target writes <build>/guest/{vmlinuz,vmlinux,initramfs.cpio.gz,image.sha256}. Not part of `all` (it
# downloads Debian packages on the first run); the microVM tests depend on it through the ctest
# fixture guest_image (tests/microvm.cmake), so `ctest` builds it once per run, cached after.
if(TARGET sbx-guest-init AND TARGET sbx-agent AND TARGET sbx-echo-agent)
  set(SBX_GUEST_DIR ${CMAKE_BINARY_DIR}/guest)
  add_custom_command(
    OUTPUT ${SBX_GUEST_DIR}/.stamp
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/build-guest-image ${SBX_GUEST_DIR}
            $<TARGET_FILE:sbx-guest-init> $<TARGET_FILE:sbx-agent> $<TARGET_FILE:sbx-echo-agent>
    DEPENDS ${CMAKE_CURRENT_LIST_DIR}/build-guest-image sbx-guest-init sbx-agent sbx-echo-agent
    COMMENT "Building the guest image (kernel, initramfs) in ${SBX_GUEST_DIR}"
    VERBATIM USES_TERMINAL)
  add_custom_target(guest-image DEPENDS ${SBX_GUEST_DIR}/.stamp)
endif()
