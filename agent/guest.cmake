# The guest side of the microVM drivers: sbx-guest-init (PID 1 of the guest image) and the
# virtio-serial/vsock channel that sbx-agent opens in a guest (--virtio-port / --vsock-port).
# Static and without sanitizers like the other in-Sandbox programs (sbx_static_agent is defined by
# agent/agent.cmake, included before this file).
if(COMMAND sbx_static_agent)
  sbx_static_agent(sbx-guest-init ${CMAKE_CURRENT_LIST_DIR}/guest_init.c
                   ${CMAKE_CURRENT_LIST_DIR}/guest_image.c)
endif()
if(TARGET sbx-agent)
  target_sources(sbx-agent PRIVATE ${CMAKE_CURRENT_LIST_DIR}/channel_vm.c)
endif()
