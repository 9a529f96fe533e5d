# The process driver's in-Sandbox programs: sbx-agent (the channel relay) and sbx-echo-agent (the
# quickstart App's command). Static, no sanitizers: they run inside a jail that has neither a
# dynamic loader for our libraries nor a sanitizer runtime. relay.c, relay_buf.c and json_check.c
# are also built into a normal library (sbxrelay) so unit tests and fuzz targets can run the JSON
# reader under ASan.
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

sbx_static_agent(sbx-agent ${SBX_AGENT_DIR}/sbx-agent.c ${SBX_AGENT_DIR}/relay.c ${SBX_AGENT_DIR}/relay_buf.c
                 ${SBX_AGENT_DIR}/json_check.c
                 ${SBX_AGENT_DIR}/guest_nfs.c ${SBX_AGENT_DIR}/image_user.c
                 ${SBX_AGENT_DIR}/sandbox_filter.c)
# The process driver's seccomp filter: libseccomp-dev's static archive (the agent is static).
find_library(SBX_SECCOMP_STATIC NAMES libseccomp.a REQUIRED)
target_link_libraries(sbx-agent PRIVATE ${SBX_SECCOMP_STATIC})
sbx_static_agent(sbx-echo-agent ${SBX_AGENT_DIR}/echo-agent.c ${SBX_AGENT_DIR}/relay.c ${SBX_AGENT_DIR}/relay_buf.c
                 ${SBX_AGENT_DIR}/json_check.c
                 ${SBX_AGENT_DIR}/guest_nfs.c ${SBX_AGENT_DIR}/image_user.c)
# sbx-echo-agent is the quickstart App's command, started at every activation: with musl (Debian's
# musl-tools) it starts in about 0.15 ms here instead of 1.2 ms with glibc, whose start-up runs
# dozens of CPUID instructions, each a hypervisor trap (agent/musl-cc says more). Without musl-gcc
# it is built with glibc as before. sbx-agent stays on glibc: it links libseccomp's glibc archive,
# and it starts once per Sandbox, not per activation.
find_program(SBX_MUSL_GCC musl-gcc)
if(SBX_MUSL_GCC AND CMAKE_C_COMPILER_ID STREQUAL "GNU") # musl-gcc is gcc: gcc's flags only
  # musl has no kernel headers: a directory with only linux/, asm/ and asm-generic/ of the
  # system's, so that no glibc header is found in their place.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch OUTPUT_VARIABLE sbx_multiarch
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(sbx_kernel_headers ${CMAKE_CURRENT_BINARY_DIR}/musl-kernel-headers)
  file(MAKE_DIRECTORY ${sbx_kernel_headers})
  foreach(sub linux asm-generic)
    file(CREATE_LINK /usr/include/${sub} ${sbx_kernel_headers}/${sub} SYMBOLIC)
  endforeach()
  if(EXISTS /usr/include/${sbx_multiarch}/asm)
    file(CREATE_LINK /usr/include/${sbx_multiarch}/asm ${sbx_kernel_headers}/asm SYMBOLIC)
  else()
    file(CREATE_LINK /usr/include/asm ${sbx_kernel_headers}/asm SYMBOLIC)
  endif()
  set_target_properties(sbx-echo-agent PROPERTIES
    C_COMPILER_LAUNCHER "${SBX_AGENT_DIR}/musl-cc;${sbx_kernel_headers}"
    C_LINKER_LAUNCHER "${SBX_AGENT_DIR}/musl-cc;${sbx_kernel_headers}")
else()
  message(STATUS "sbx-echo-agent is built with glibc (no musl-gcc, or not gcc): slower to start")
endif()

add_library(sbxrelay STATIC ${SBX_AGENT_DIR}/relay.c ${SBX_AGENT_DIR}/relay_buf.c ${SBX_AGENT_DIR}/json_check.c
                            ${SBX_AGENT_DIR}/guest_nfs.c ${SBX_AGENT_DIR}/image_user.c)
target_include_directories(sbxrelay PUBLIC ${SBX_AGENT_DIR})
