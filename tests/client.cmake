# libtally: the asynchronous pipelined client against the real tallyd.
tally_add_test(test_client_async test_client_async.c LABELS e2e)
target_link_libraries(test_client_async PRIVATE tally_proto)
add_dependencies(test_client_async tallyd tally_cli)
