# Bad input against the real tallyd (docs/FAILURE-MODES.md §4): the binary socket and
# HTTP, each bad input with its exact answer, the daemon alive and counts exact.
add_library(tally_test_badinput STATIC badinput_env.c)
target_include_directories(tally_test_badinput PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(tally_test_badinput PUBLIC tally_proto tally_test_support
                      PkgConfig::CMOCKA PRIVATE tally_warnings)

tally_add_test(test_badinput_socket test_badinput_socket.c LABELS e2e)
target_link_libraries(test_badinput_socket PRIVATE tally_test_badinput)
add_dependencies(test_badinput_socket tallyd tally_cli)

tally_add_test(test_badinput_http test_badinput_http.c LABELS e2e slow)
target_link_libraries(test_badinput_http PRIVATE tally_test_badinput)
add_dependencies(test_badinput_http tallyd tally_cli)

# Secrets: key pages, dumpability, file and socket modes, tokens in files, logs and memory.
tally_add_test(test_secret_hygiene test_secret_hygiene.c LABELS e2e)
target_link_libraries(test_secret_hygiene PRIVATE tally_test_badinput PkgConfig::SODIUM)
add_dependencies(test_secret_hygiene tallyd tally_cli)

# Inputs found by the fuzz targets, replayed as unit tests.
tally_add_test(test_badinput_codec test_badinput_codec.c LABELS unit)
target_link_libraries(test_badinput_codec PRIVATE tally_proto)
