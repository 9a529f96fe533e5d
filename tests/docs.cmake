# Documentation that must match the code.
add_test(NAME unit.docs.config_reference
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/check_config_reference.sh $<TARGET_FILE:sbx-gateway>
                 ${CMAKE_SOURCE_DIR})

# Every path the docs name (README.md, docs/, schema/README.md, tests/README.md) exists.
add_test(NAME unit.docs.paths COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/check_doc_paths.sh ${CMAKE_SOURCE_DIR})
# ...and the check itself fails on a path that does not exist, or a function its file lacks.
add_test(NAME unit.docs.paths_catches_missing
         COMMAND sh -c "d=$(mktemp -d) && mkdir -p $d/gateway && echo 'int f(void);' >$d/gateway/a.c && \
echo 'See `gateway/a.c:f`.' >$d/README.md && ${CMAKE_CURRENT_SOURCE_DIR}/check_doc_paths.sh $d && \
echo 'See `gateway/b.c`.' >$d/README.md && ! ${CMAKE_CURRENT_SOURCE_DIR}/check_doc_paths.sh $d && \
echo 'See `gateway/a.c:g`.' >$d/README.md && ! ${CMAKE_CURRENT_SOURCE_DIR}/check_doc_paths.sh $d; r=$?; rm -rf $d; exit $r")
