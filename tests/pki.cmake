# The installation's keys (common/pki.c): creation, reopening, two processes creating at once, a
# damaged directory, server certificates and identity tokens, from several threads at once.
add_executable(test_pki ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_pki.c)
target_link_libraries(test_pki PRIVATE sbxcommon PkgConfig::CMOCKA Threads::Threads)
add_test(NAME unit.common.pki COMMAND test_pki)
