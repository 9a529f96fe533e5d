# The Sandboxes' callback API's building blocks in libsbxcommon: JSON Merge Patch (RFC 7396, the
# PATCH of a Session's metadata), the Sandbox context (callback tokens, reserved env names) and
# the Sandbox's secrets in memory (placeholders, host patterns), App secrets at rest (the AEAD, the
# key file) and their names' and hosts' rules.
foreach(t json_merge_patch sandbox_context secret_set secret_box)
  add_executable(test_${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE sbxcommon PkgConfig::CMOCKA)
  add_test(NAME unit.common.${t} COMMAND test_${t})
endforeach()
