# The schema: migrations versus schema/schema.sql, version refusal, append-only events.
add_executable(test_schema ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_schema.c)
target_link_libraries(test_schema PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
target_compile_definitions(test_schema PRIVATE SBX_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_test(NAME unit.schema COMMAND test_schema)
