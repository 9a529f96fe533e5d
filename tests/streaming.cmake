# Streaming: an agent's partial output (the store's chunks on both engines), the message stream and
# the live event feed over Server-Sent Events, end to end on the real gateway, worker and process
# driver.
add_executable(test_store_chunks ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_chunks.c
                                 ${CMAKE_CURRENT_SOURCE_DIR}/unit/store_fixture.c)
target_link_libraries(test_store_chunks PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE)
add_test(NAME unit.streaming.store_chunks COMMAND test_store_chunks)
add_test(NAME unit.pg.store_chunks
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/pg-run.sh $<TARGET_FILE:test_store_chunks>)
set_tests_properties(unit.pg.store_chunks PROPERTIES TIMEOUT 180)
