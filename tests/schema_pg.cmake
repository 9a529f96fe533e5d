# The PostgreSQL schema: migrations/postgres versus schema/postgres.sql and versus the SQLite
# schema, append-only events, and the auditor views answering alike. Runs beside a throwaway
# cluster of its own (tests/pg-run.sh).
if(NOT TARGET PkgConfig::LIBPQ)
  pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET GLOBAL libpq)
endif()
add_executable(test_schema_pg ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_schema_pg.c)
target_link_libraries(test_schema_pg PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE
                                             PkgConfig::LIBPQ)
target_compile_definitions(test_schema_pg PRIVATE SBX_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_test(NAME unit.schema.pg
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_schema_pg>)
set_tests_properties(unit.schema.pg PROPERTIES TIMEOUT 120)
