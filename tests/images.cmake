# Images (issue 14): the importer on archives the test writes (cmocka, as root), and the test image
# builder's cache (tests/images/build-test-images.sh) for the live tests.
add_executable(test_image_import ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_image_import.c)
target_link_libraries(test_image_import PRIVATE sbxworker PkgConfig::CMOCKA)
add_test(NAME unit.image_import COMMAND test_image_import)
set_tests_properties(unit.image_import PROPERTIES SKIP_RETURN_CODE 77)
