# The benchmark tools: RESP codec, echo server, Lua limiters in redis-server,
# the link filler, the cluster log's bench (bench/). They run the built tools; they time nothing.
tally_add_test(test_bench_tools test_bench_tools.c ${CMAKE_SOURCE_DIR}/bench/bench_resp.c LABELS e2e)
target_include_directories(test_bench_tools PRIVATE ${CMAKE_SOURCE_DIR}/bench)
add_dependencies(test_bench_tools tally-bench tally-bench-echo tally-bench-links tally-bench-cluster
                 tally_cli)
