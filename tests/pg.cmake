# The PostgreSQL store: its engine (common/sql_pg.c) against a throwaway cluster that
# tests/pg-run.sh starts for the test and removes afterwards.
add_executable(test_sql_pg ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sql_pg.c)
target_link_libraries(test_sql_pg PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::LIBPQ
                                          Threads::Threads)
add_test(NAME unit.pg.engine COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_sql_pg>)
set_tests_properties(unit.pg.engine PROPERTIES TIMEOUT 300)
