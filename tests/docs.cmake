# Documentation that must match the code.
add_test(NAME unit.docs.config_reference
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/check_config_reference.sh $<TARGET_FILE:sbx-gateway>
                 ${CMAKE_SOURCE_DIR})

# Every path the docs name (README.md, docs/, schema/README.md, tests/README.md) exists.
add_test(NAME unit.docs.paths COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/check_doc_paths.sh ${CMAKE_SOURCE_DIR})
