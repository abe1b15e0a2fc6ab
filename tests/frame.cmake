# Binary framing and client protocol codecs.
tally_add_test(test_proto_frame test_proto_frame.c LABELS unit)
target_link_libraries(test_proto_frame PRIVATE tally_proto)

# Framed connections over a socketpair: the growing read buffer.
tally_add_test(test_proto_stream test_proto_stream.c LABELS unit)
target_link_libraries(test_proto_stream PRIVATE tally_proto)
