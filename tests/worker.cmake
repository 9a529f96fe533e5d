# The worker area: the queue side of the store (cmocka) and live end-to-end tests of the gateway,
# the workers and the process driver.
add_executable(test_store_queue ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store_queue.c)
target_link_libraries(test_store_queue PRIVATE sbxcommon PkgConfig::CMOCKA PkgConfig::SQLITE
                                               Threads::Threads)
add_test(NAME unit.worker.store_queue COMMAND test_store_queue)
