# sbxctl: the operators' and auditors' command line tool (build/tools/sbxctl). It reads the store
# read-only with SQLite directly; it links libsbxcommon for config and the schema version, and
# libsbxworker only for the firewall's read-only fw_open() (and libcurl, which it links, for
# `sbxctl image push`'s streamed upload); GnuTLS for an HTTPS gateway (sbxctl_http.c).
file(GLOB sbxctl_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/sbxctl*.c)
add_executable(sbxctl ${sbxctl_sources})
target_include_directories(sbxctl PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(sbxctl PRIVATE sbxworker sbxcommon PkgConfig::SQLITE PkgConfig::JANSSON
                      PkgConfig::GNUTLS)
install(TARGETS sbxctl RUNTIME DESTINATION bin)
