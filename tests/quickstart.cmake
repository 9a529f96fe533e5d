# The README's quickstart on the embedded defaults (relative ./data in a fresh directory).
find_program(NODE_EXECUTABLE node)
if(NODE_EXECUTABLE)
  add_test(NAME it.quickstart
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/in-netns.sh ${NODE_EXECUTABLE} --test
                   ${CMAKE_CURRENT_SOURCE_DIR}/integration/quickstart/quickstart.test.mjs)
  set_tests_properties(it.quickstart PROPERTIES
    ENVIRONMENT "SBX_GATEWAY_BIN=$<TARGET_FILE:sbx-gateway>;SBX_WORKER_BIN=$<TARGET_FILE:sbx-worker>"
    TIMEOUT 120)
endif()

sbx_test_labels(root it.quickstart)
