# The hosts area: several worker hosts on one store. Unit: registration, host loss and placement
# in the store (cmocka, SQLite). Integration: worker processes of two hosts (different host ids
# and jail roots) and two gateways on one database, on the fork test driver.
add_executable(test_store_hosts ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_hosts.c)
target_link_libraries(test_store_hosts PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.hosts.store COMMAND test_store_hosts)
