# The network boundary (issue 5): the firewall's batches decoded (unit), and real packets between
# network namespaces the test makes itself (integration). Both run in their own network namespace,
# so the host's nftables ruleset is never touched.
set(net_it_dir ${CMAKE_CURRENT_SOURCE_DIR}/integration/network)

add_executable(test_firewall_batch ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_firewall_batch.c)
target_link_libraries(test_firewall_batch PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.host.firewall_batch COMMAND test_firewall_batch)

add_executable(test_firewall_netns ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_firewall_netns.c)
target_link_libraries(test_firewall_netns PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.host.links COMMAND test_firewall_netns)

# The DNS wire format of sbx's forwarder (issue 15).
add_executable(test_dns_wire ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dns_wire.c)
target_link_libraries(test_dns_wire PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.host.dns_wire COMMAND test_dns_wire)

# The forwarder itself, concurrent queries against a resolver the test runs (in its own network
# namespace, with a real `table inet sbx`).
add_executable(test_dns_forwarder ${net_it_dir}/test_dns_forwarder.c)
target_link_libraries(test_dns_forwarder PRIVATE sbxworker PkgConfig::CMOCKA Threads::Threads)
add_test(NAME it.network.dns_forwarder COMMAND unshare --net -- $<TARGET_FILE:test_dns_forwarder>)

# Reading the sets while another writer changes them (a dump in several parts, torn by a change or
# a hash resize between them), in a network namespace the test makes.
add_executable(test_firewall_dumps ${net_it_dir}/test_firewall_dumps.c)
target_link_libraries(test_firewall_dumps PRIVATE sbxworker PkgConfig::CMOCKA Threads::Threads)
add_test(NAME it.network.firewall_dumps COMMAND test_firewall_dumps)
set_tests_properties(it.network.firewall_dumps PROPERTIES TIMEOUT 120)

add_executable(net_probe ${net_it_dir}/net_probe.c)
add_executable(net_ctl ${net_it_dir}/net_ctl.c)
target_link_libraries(net_ctl PRIVATE sbxworker)

add_test(NAME it.network.packets
         COMMAND unshare --net --mount -- bash ${net_it_dir}/it_packets.sh
                 $<TARGET_FILE:net_ctl> $<TARGET_FILE:net_probe>)
set_tests_properties(it.network.packets PROPERTIES TIMEOUT 120)

# tools/bench/firewall: time per Sandbox firewall change at 10, 100 and 1,000 live Sandboxes.
add_executable(sbx-bench-firewall ${CMAKE_SOURCE_DIR}/tools/bench/firewall.c)
target_link_libraries(sbx-bench-firewall PRIVATE sbxworker)
set_target_properties(sbx-bench-firewall PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                    ${CMAKE_BINARY_DIR}/tools/bench)
# A short run, so that the benchmark keeps working; it asserts nothing about speed.
add_test(NAME it.network.bench_firewall_runs
         COMMAND sbx-bench-firewall --samples 20 --max 100)

# tools/bench/egress: policy change cost at 10, 100 and 1,000 live Sandboxes; DNS lookup latency
# through sbx's forwarder beside a direct lookup.
add_executable(sbx-bench-egress ${CMAKE_SOURCE_DIR}/tools/bench/egress.c)
target_link_libraries(sbx-bench-egress PRIVATE sbxworker)
set_target_properties(sbx-bench-egress PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                  ${CMAKE_BINARY_DIR}/tools/bench)
# A short run in a mount namespace too (dnsmasq's pid file, the resolver on lo); asserts nothing
# about speed.
add_test(NAME it.network.bench_egress_runs
         COMMAND unshare --mount -- $<TARGET_FILE:sbx-bench-egress> --samples 20 --max 100)

add_test(NAME it.network.slots
         COMMAND unshare --net -- bash ${net_it_dir}/it_slots.sh $<TARGET_FILE:net_ctl>)
set_tests_properties(it.network.slots PROPERTIES TIMEOUT 60)

# The workers' own path: a Sandbox booted by the process driver gets exactly these rules.
if(TARGET rootfs)
  add_executable(net_driver_check ${net_it_dir}/net_driver_check.c)
  target_link_libraries(net_driver_check PRIVATE sbxworker)
  add_dependencies(net_driver_check rootfs)
  add_test(NAME it.network.process_driver
           COMMAND unshare --net --mount -- bash ${net_it_dir}/it_driver.sh
                   $<TARGET_FILE:net_driver_check> $<TARGET_FILE:net_probe>
                   ${CMAKE_BINARY_DIR}/rootfs)
  set_tests_properties(it.network.process_driver PROPERTIES TIMEOUT 90)
endif()

sbx_test_labels(root it.network.dns_forwarder it.network.firewall_dumps it.network.packets
                it.network.bench_firewall_runs it.network.bench_egress_runs it.network.slots
                it.network.process_driver)

# The brokering proxy's request rewriting: placeholders replaced for their secrets' hosts only,
# misuse, another Sandbox's placeholders, and the HTTP/1.1 framing it follows.
add_executable(test_secret_proxy_http ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_secret_proxy_http.c)
target_link_libraries(test_secret_proxy_http PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.worker.host.secret_proxy_http COMMAND test_secret_proxy_http)

# The proxy itself in a network namespace of its own: a TLS "model API" (a test CA given as
# upstream_ca_file) that echoes headers and streams SSE, clients from two "Sandbox" addresses
# redirected to the proxy by an nftables rule, the audit records, the bound.
add_executable(secret_proxy_run ${net_it_dir}/secret_proxy_run.c)
target_link_libraries(secret_proxy_run PRIVATE sbxworker)
add_test(NAME it.network.secret_proxy
         COMMAND unshare --net --mount -- python3 ${net_it_dir}/it_secret_proxy.py
                 $<TARGET_FILE:secret_proxy_run> $<TARGET_FILE:net_ctl>)
set_tests_properties(it.network.secret_proxy PROPERTIES TIMEOUT 120)
sbx_test_labels(root it.network.secret_proxy)

# tools/bench/secret_proxy.py: a brokered HTTPS request's added latency and throughput beside the
# same requests sent directly, in namespaces of its own. A short run, so that the benchmark keeps
# working; it asserts nothing about speed.
add_test(NAME it.network.bench_secret_proxy_runs
         COMMAND unshare --net --mount -- python3 ${CMAKE_SOURCE_DIR}/tools/bench/secret_proxy.py
                 $<TARGET_FILE:secret_proxy_run> $<TARGET_FILE:net_ctl> --samples 10 --threads 2)
set_tests_properties(it.network.bench_secret_proxy_runs PROPERTIES TIMEOUT 120)
sbx_test_labels(root it.network.bench_secret_proxy_runs)
