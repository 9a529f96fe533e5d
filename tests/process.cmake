# The process driver and the in-Sandbox agents: live Sandboxes (namespaces, cgroups, mounts; needs
# root) and unit tests of the agents' line-JSON reader and of jail paths.
add_executable(test_process_driver ${CMAKE_CURRENT_LIST_DIR}/integration/process/test_process_driver.c)
target_link_libraries(test_process_driver PRIVATE sbxworker PkgConfig::CMOCKA PkgConfig::JANSSON Threads::Threads)
target_compile_definitions(test_process_driver PRIVATE SBX_BUILD_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(test_process_driver rootfs)
add_test(NAME it.process.driver COMMAND ${CMAKE_CURRENT_LIST_DIR}/in-netns.sh $<TARGET_FILE:test_process_driver>)
set_tests_properties(it.process.driver PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)

add_executable(test_agent_json ${CMAKE_CURRENT_LIST_DIR}/integration/process/test_agent_json.c)
target_link_libraries(test_agent_json PRIVATE sbxrelay PkgConfig::CMOCKA)
target_compile_definitions(test_agent_json PRIVATE SBX_AGENT_BIN="$<TARGET_FILE:sbx-agent>"
                                                   SBX_ECHO_AGENT_BIN="$<TARGET_FILE:sbx-echo-agent>")
add_dependencies(test_agent_json sbx-agent sbx-echo-agent)
add_test(NAME unit.agent.json COMMAND test_agent_json)

add_executable(test_jail ${CMAKE_CURRENT_LIST_DIR}/unit/test_jail.c)
target_link_libraries(test_jail PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.host.jail COMMAND test_jail)

add_test(NAME it.process.rootfs
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/integration/process/rootfs_test.sh
                 ${CMAKE_SOURCE_DIR}/tools/build-rootfs $<TARGET_FILE:sbx-agent>
                 $<TARGET_FILE:sbx-echo-agent>)

# The per-Sandbox uid allocator (worker/host/uid_range.c) on the host-wide directory; needs root.
add_executable(test_uid_range ${CMAKE_CURRENT_LIST_DIR}/unit/test_uid_range.c)
target_link_libraries(test_uid_range PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.host.uid_range COMMAND test_uid_range)
set_tests_properties(unit.worker.host.uid_range PROPERTIES SKIP_RETURN_CODE 77)

# Id-mapping user namespaces (worker/host/userns_map.c) made by several threads at once, as
# concurrent boots of an imported image make them; needs root.
add_executable(test_userns_map ${CMAKE_CURRENT_LIST_DIR}/unit/test_userns_map.c)
target_link_libraries(test_userns_map PRIVATE sbxworker PkgConfig::CMOCKA Threads::Threads)
add_test(NAME unit.worker.host.userns_map COMMAND test_userns_map)
set_tests_properties(unit.worker.host.userns_map PROPERTIES TIMEOUT 120)

sbx_test_labels(root it.process.driver unit.worker.host.uid_range unit.worker.host.userns_map)
