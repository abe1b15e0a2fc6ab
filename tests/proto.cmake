# proto: the HTTP server in-process (raw libuv clients on the same loop), its
# API without traffic, and tallyd as a real process (spawned with libuv).
tally_add_test(test_proto_http test_proto_http.c)
target_link_libraries(test_proto_http PRIVATE tally_proto ${HTTP_PARSER_LIB})
target_include_directories(test_proto_http PRIVATE ${HTTP_PARSER_INCLUDE})

tally_add_test(test_proto_http_api test_proto_http_api.c)
target_link_libraries(test_proto_http_api PRIVATE tally_proto)

tally_add_test(test_tallyd test_tallyd.c)
target_link_libraries(test_tallyd PRIVATE tally_proto)
add_dependencies(test_tallyd tallyd tally_cli)
