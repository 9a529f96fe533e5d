# The process driver's in-Sandbox programs: sbx-agent (the channel relay) and sbx-echo-agent (the
# quickstart App's command). Static, no sanitizers: they run inside a jail that has neither a
# dynamic loader for our libraries nor a sanitizer runtime. relay.c is also built into a normal
# library (sbxrelay) so unit tests can run the JSON reader under ASan.
set(SBX_AGENT_DIR ${CMAKE_CURRENT_LIST_DIR})

function(sbx_static_agent target)
  add_executable(${target} ${ARGN})
  target_include_directories(${target} PRIVATE ${SBX_AGENT_DIR})
  # Drop the global sanitizer options for this target only.
  get_directory_property(opts COMPILE_OPTIONS)
  list(FILTER opts EXCLUDE REGEX "^-fsanitize|^-fno-sanitize")
  set_property(TARGET ${target} PROPERTY COMPILE_OPTIONS ${opts})
  get_directory_property(lopts LINK_OPTIONS)
  list(FILTER lopts EXCLUDE REGEX "^-fsanitize")
  set_property(TARGET ${target} PROPERTY LINK_OPTIONS ${lopts})
  target_compile_options(${target} PRIVATE -O2)
  target_link_options(${target} PRIVATE -static)
endfunction()

sbx_static_agent(sbx-agent ${SBX_AGENT_DIR}/sbx-agent.c ${SBX_AGENT_DIR}/relay.c
                 ${SBX_AGENT_DIR}/guest_nfs.c ${SBX_AGENT_DIR}/image_user.c)
sbx_static_agent(sbx-echo-agent ${SBX_AGENT_DIR}/echo-agent.c ${SBX_AGENT_DIR}/relay.c
                 ${SBX_AGENT_DIR}/guest_nfs.c ${SBX_AGENT_DIR}/image_user.c)

add_library(sbxrelay STATIC ${SBX_AGENT_DIR}/relay.c ${SBX_AGENT_DIR}/guest_nfs.c
                            ${SBX_AGENT_DIR}/image_user.c)
target_include_directories(sbxrelay PUBLIC ${SBX_AGENT_DIR})
