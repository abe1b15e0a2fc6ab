# cluster: the host channel, without I/O and over real TCP on a libuv loop.
tally_add_test(test_cluster_chan test_cluster_chan.c LABELS unit)
target_link_libraries(test_cluster_chan PRIVATE tally_cluster)

tally_add_test(test_cluster_conn test_cluster_conn.c LABELS unit)
target_link_libraries(test_cluster_conn PRIVATE tally_cluster)

tally_add_test(test_cluster_log test_cluster_log.c LABELS unit slow)
target_link_libraries(test_cluster_log PRIVATE tally_cluster)

# Cluster mode through tallyd and tally: init, status, restarts, the port's handshake.
tally_add_test(test_e2e_cluster test_e2e_cluster.c LABELS e2e)
add_dependencies(test_e2e_cluster tallyd tally_cli)

# The configuration on the log: a change command on any member in force on every member when
# it returns, joiners copy tally.db, restarts apply nothing twice, no majority changes nothing.
tally_add_test(test_e2e_cluster_config test_e2e_cluster_config.c serve_util.c LABELS e2e)
target_link_libraries(test_e2e_cluster_config PRIVATE PkgConfig::SQLITE3)
add_dependencies(test_e2e_cluster_config tallyd tally_cli)

# One cap across three hosts (tallyds on 127.0.0.1): every host's children lease from the
# leader's supervisors; no majority, no grant.
tally_add_test(test_e2e_cluster_leases test_e2e_cluster_leases.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_cluster_leases tallyd tally_cli)

# Three hosts, each in a network namespace of its own (ip netns, veth pairs on a bridge): a
# leader cut off and back, two of three killed. Skipped, with the reason, where namespaces
# cannot be made (not root, no iproute2).
tally_add_test(test_netns_cluster test_netns_cluster.c netns_util.c LABELS e2e)
add_dependencies(test_netns_cluster tallyd tally_cli)

tally_add_test(test_cluster_state test_cluster_state.c LABELS unit)
target_link_libraries(test_cluster_state PRIVATE tally_cluster)

# Every member's copy of every tenant's ledger: LEDGER records applied, replays, replacements,
# snapshots of the copies and their restore, failures (cluster/node_ledger*.c, real files).
tally_add_test(test_cluster_ledger test_cluster_ledger.c cluster_ledger_util.c LABELS unit)
target_link_libraries(test_cluster_ledger PRIVATE tally_cluster)
target_include_directories(test_cluster_ledger PRIVATE ${CMAKE_SOURCE_DIR}/cluster)
tally_add_test(test_cluster_ledger_snap test_cluster_ledger_snap.c cluster_ledger_util.c LABELS unit)
target_link_libraries(test_cluster_ledger_snap PRIVATE tally_cluster)
target_include_directories(test_cluster_ledger_snap PRIVATE ${CMAKE_SOURCE_DIR}/cluster)

# One host's clock 2 s ahead (libfaketime) while leadership moves across namespaces: the skew
# reported, every window at most its cap, window ids never back in any copy of the ledger.
tally_add_test(test_netns_cluster_clock test_netns_cluster_clock.c netns_util.c LABELS e2e)
target_link_libraries(test_netns_cluster_clock PRIVATE tally_ledger_internal)
add_dependencies(test_netns_cluster_clock tallyd tally_cli)
