# Documentation that must match the code.
add_test(NAME unit.docs.config_reference
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/check_config_reference.sh $<TARGET_FILE:sbx-gateway>
                 ${CMAKE_SOURCE_DIR})
