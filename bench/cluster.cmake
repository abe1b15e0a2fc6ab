# tally-bench-cluster: a batch committed on a 3-member log (libraft over host channels, on
# 127.0.0.1) against one host's append + fdatasync, and the failover time.
add_executable(tally-bench-cluster bench_cluster.c)
target_link_libraries(tally-bench-cluster PRIVATE tally_cluster tally_warnings)
