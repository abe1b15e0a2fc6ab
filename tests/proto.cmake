# proto: the HTTP server in-process (raw libuv clients on the same loop), its
# API without traffic, deferred answers, and tallyd as a real process (spawned
# with libuv).

# The raw HTTP client and the standard server fixture the HTTP suites share.
add_library(tally_test_http STATIC support/test_http_client.c)
target_include_directories(tally_test_http PUBLIC support ${HTTP_PARSER_INCLUDE})
target_link_libraries(tally_test_http PUBLIC tally_proto PkgConfig::CMOCKA ${HTTP_PARSER_LIB}
                      PRIVATE tally_warnings)

tally_add_test(test_proto_http test_proto_http.c LABELS unit)
target_link_libraries(test_proto_http PRIVATE tally_test_http)

tally_add_test(test_proto_http_conns test_proto_http_conns.c LABELS unit)
target_link_libraries(test_proto_http_conns PRIVATE tally_test_http)

tally_add_test(test_proto_http_defer test_proto_http_defer.c LABELS unit)
target_link_libraries(test_proto_http_defer PRIVATE tally_test_http)

tally_add_test(test_proto_http_api test_proto_http_api.c LABELS unit)
target_link_libraries(test_proto_http_api PRIVATE tally_proto)

tally_add_test(test_tallyd test_tallyd.c LABELS e2e)
target_link_libraries(test_tallyd PRIVATE tally_proto)
add_dependencies(test_tallyd tallyd tally_cli)
