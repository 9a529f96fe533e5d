# The network boundary (issue 5): the firewall's batches decoded (unit), and real packets between
# network namespaces the test makes itself (integration). Both run in their own network namespace,
# so the host's nftables ruleset is never touched.
set(net_it_dir ${CMAKE_CURRENT_SOURCE_DIR}/integration/network)

add_executable(test_firewall_batch ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_firewall_batch.c)
target_link_libraries(test_firewall_batch PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.network.firewall_batch COMMAND test_firewall_batch)

add_executable(net_probe ${net_it_dir}/net_probe.c)
add_executable(net_ctl ${net_it_dir}/net_ctl.c)
target_link_libraries(net_ctl PRIVATE sbxworker)

add_test(NAME it.network.packets
         COMMAND unshare --net --mount -- bash ${net_it_dir}/it_packets.sh
                 $<TARGET_FILE:net_ctl> $<TARGET_FILE:net_probe>)
set_tests_properties(it.network.packets PROPERTIES TIMEOUT 120 RUN_SERIAL ON)
