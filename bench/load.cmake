# tally-bench: the binary-protocol load generator (bench/run uses it); --redis drives
# redis-server's Lua limiters with the same load.
add_executable(tally-bench tally_bench.c bench_resp.c)
target_link_libraries(tally-bench PRIVATE tally_proto tally_warnings m)
# tally-bench-echo: a bare libuv server speaking tally's framing, the transport's limit.
add_executable(tally-bench-echo echo_server.c)
target_link_libraries(tally-bench-echo PRIVATE tally_proto tally_warnings)
# tally-bench-links: many tenants and links in one transaction (growth benchmarks).
add_executable(tally-bench-links bench_links.c)
target_link_libraries(tally-bench-links PRIVATE tally_store tally_tenant tally_warnings)
