# Wake-ups (common/notify.[ch]) on both transports: Unix datagrams on their own, PostgreSQL
# LISTEN/NOTIFY on a throwaway cluster started by tests/pg-run.sh (restarted by the test).
add_executable(test_notify ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_notify.c)
target_link_libraries(test_notify PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::EVENT
                                          Threads::Threads) # libpq comes with sbxcommon
add_test(NAME unit.notify.unix COMMAND test_notify unix)

if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh)
  add_test(NAME it.notify.pg COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_notify> pg)
  set_tests_properties(it.notify.pg PROPERTIES TIMEOUT 180)
endif()
