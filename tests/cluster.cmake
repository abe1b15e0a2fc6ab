# cluster: the host channel, without I/O and over real TCP on a libuv loop.
tally_add_test(test_cluster_chan test_cluster_chan.c LABELS unit)
target_link_libraries(test_cluster_chan PRIVATE tally_cluster)

tally_add_test(test_cluster_conn test_cluster_conn.c LABELS unit)
target_link_libraries(test_cluster_conn PRIVATE tally_cluster)

tally_add_test(test_cluster_log test_cluster_log.c LABELS unit)
target_link_libraries(test_cluster_log PRIVATE tally_cluster)
