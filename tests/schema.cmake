# The schema: migrations versus schema/schema.sql, version refusal, append-only events.
add_executable(test_schema ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_schema.c)
target_link_libraries(test_schema PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
target_compile_definitions(test_schema PRIVATE SBX_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_test(NAME unit.schema COMMAND test_schema)

# Concurrent first opens of an SQLite store (processes of either kind at once on a fresh file).
add_executable(test_store_first_open ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_first_open.c)
target_link_libraries(test_store_first_open PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.store.first_open COMMAND test_store_first_open)

# The SQLite store's WAL checkpointer keeps the WAL under its bound while the committer writes.
add_executable(test_store_checkpoint ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_checkpoint.c)
target_link_libraries(test_store_checkpoint PRIVATE sbxcommon PkgConfig::CMOCKA Threads::Threads)
add_test(NAME unit.store.checkpoint COMMAND test_store_checkpoint)
set_tests_properties(unit.store.checkpoint PROPERTIES TIMEOUT 120)

# The claim that overlaps the enqueue's fsync: visible to a worker before the sync, the watermark
# and the 202 after it (common/commit_watermark.h).
add_executable(test_claim_overlap ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_claim_overlap.c)
target_link_libraries(test_claim_overlap PRIVATE sbxcommon PkgConfig::CMOCKA Threads::Threads)
add_test(NAME unit.store.claim_overlap COMMAND test_claim_overlap)
