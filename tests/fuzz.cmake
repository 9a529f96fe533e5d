# libFuzzer targets for every parser that sees caller or agent bytes (tests/fuzz/).
#
# libFuzzer needs clang, and the normal build uses gcc, so the targets live in a second build tree
# configured with -DSBX_FUZZ=ON and CC=clang-14 (tools/fuzz.sh makes it). In that tree every
# it.fuzz.<target> test runs its target for SBX_FUZZ_SECONDS from the checked-in seed corpus and
# fails on a crash, a leak or a sanitizer report. In the normal tree the same it.fuzz.* tests
# build that second tree first (fixture it.fuzz.build) and are skipped when clang or its
# libFuzzer runtime is missing.
option(SBX_FUZZ "Build the libFuzzer targets (configure with CC=clang-14; see tools/fuzz.sh)" OFF)
set(SBX_FUZZ_SECONDS 8 CACHE STRING "Seconds each it.fuzz.* test fuzzes its target")
set(SBX_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(SBX_FUZZ_TARGETS json_bodies route_query auth_header idempotency_key agent_channel agent_relay
                     egress_policy dns_wire secret_proxy_http)

if(SBX_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SBX_FUZZ=ON needs clang (configure with -DCMAKE_C_COMPILER=clang-14)")
  endif()
  # Coverage feedback inside the libraries the targets exercise, not only in the harnesses.
  foreach(lib sbxcommon sbxgateway sbxworker sbxrelay)
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
  endforeach()

  function(sbx_fuzz_target name)
    add_executable(fuzz_${name} ${SBX_FUZZ_DIR}/fuzz_${name}.c)
    target_include_directories(fuzz_${name} PRIVATE ${SBX_FUZZ_DIR})
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined -g)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${name} PRIVATE ${ARGN})
  endfunction()
  sbx_fuzz_target(json_bodies sbxgateway)
  sbx_fuzz_target(route_query sbxgateway)
  sbx_fuzz_target(auth_header sbxgateway)
  sbx_fuzz_target(idempotency_key sbxgateway)
  sbx_fuzz_target(agent_channel sbxworker)
  sbx_fuzz_target(agent_relay sbxrelay PkgConfig::JANSSON)
  sbx_fuzz_target(egress_policy sbxcommon)
  sbx_fuzz_target(dns_wire sbxworker)
  sbx_fuzz_target(secret_proxy_http sbxworker)
  target_sources(fuzz_agent_relay PRIVATE ${SBX_FUZZ_DIR}/jansson_oracle.c)

  foreach(t IN LISTS SBX_FUZZ_TARGETS)
    add_test(NAME it.fuzz.${t}
             COMMAND ${SBX_FUZZ_DIR}/run_fuzz.sh $<TARGET_FILE:fuzz_${t}>
                     ${SBX_FUZZ_DIR}/corpus/${t} ${SBX_FUZZ_SECONDS})
    set_tests_properties(it.fuzz.${t} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
else()
  set(fuzz_tree ${CMAKE_BINARY_DIR}/fuzz-tree)
  add_test(NAME it.fuzz.build
           COMMAND ${CMAKE_SOURCE_DIR}/tools/fuzz.sh --build-only --build-dir ${fuzz_tree})
  set_tests_properties(it.fuzz.build PROPERTIES FIXTURES_SETUP sbx_fuzz_tree TIMEOUT 900
                                                SKIP_RETURN_CODE 77)
  foreach(t IN LISTS SBX_FUZZ_TARGETS)
    add_test(NAME it.fuzz.${t}
             COMMAND ${SBX_FUZZ_DIR}/run_fuzz.sh ${fuzz_tree}/tests/fuzz_${t}
                     ${SBX_FUZZ_DIR}/corpus/${t} ${SBX_FUZZ_SECONDS})
    set_tests_properties(it.fuzz.${t} PROPERTIES FIXTURES_REQUIRED sbx_fuzz_tree TIMEOUT 120
                                                 SKIP_RETURN_CODE 77)
  endforeach()
endif()

# Regression: sbx-agent and the worker must agree on what JSON is, or the worker takes a relayed
# line for a broken channel and replaces the Sandbox. json_check.c refuses \u0000 and unpaired
# UTF-16 surrogates as jansson does, and both accept duplicate keys. Runs the relay target on the
# three reproducers that once disagreed.
if(SBX_FUZZ)
  set(relay_fuzz_bin $<TARGET_FILE:fuzz_agent_relay>)
else()
  set(relay_fuzz_bin ${CMAKE_BINARY_DIR}/fuzz-tree/tests/fuzz_agent_relay)
endif()
add_test(NAME it.fuzz.agent_relay_host_agreement
         COMMAND ${relay_fuzz_bin} -error_exitcode=1 ${SBX_FUZZ_DIR}/regressions/relay_lone_surrogate
                 ${SBX_FUZZ_DIR}/regressions/relay_duplicate_key
                 ${SBX_FUZZ_DIR}/regressions/relay_nul_escape)
if(NOT SBX_FUZZ)
  set_tests_properties(it.fuzz.agent_relay_host_agreement PROPERTIES FIXTURES_REQUIRED sbx_fuzz_tree)
endif()

sbx_test_labels(slow it.fuzz.build) # a second build tree, with clang
