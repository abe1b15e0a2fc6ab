# cluster: the host channel, without I/O and over real TCP on a libuv loop.
tally_add_test(test_cluster_chan test_cluster_chan.c LABELS unit)
target_link_libraries(test_cluster_chan PRIVATE tally_cluster)

tally_add_test(test_cluster_conn test_cluster_conn.c LABELS unit)
target_link_libraries(test_cluster_conn PRIVATE tally_cluster)

tally_add_test(test_cluster_log test_cluster_log.c LABELS unit slow)
target_link_libraries(test_cluster_log PRIVATE tally_cluster)
target_include_directories(test_cluster_log PRIVATE ${CMAKE_SOURCE_DIR}/cluster)

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
tally_add_test(test_e2e_cluster_leases test_e2e_cluster_leases.c serve_util.c cluster_digest.c
               LABELS e2e)
target_link_libraries(test_e2e_cluster_leases PRIVATE PkgConfig::SQLITE3)
add_dependencies(test_e2e_cluster_leases tallyd tally_cli)

# Three hosts, each in a network namespace of its own (ip netns, veth pairs on a bridge): a
# leader cut off and back, a follower cut off (its degraded admissions charged to the ledger
# once it heals, `tally usage` equal on every member), two of three killed, packets dropped.
# Skipped, with the reason, where namespaces cannot be made (not root, no iproute2).
tally_add_test(test_netns_cluster test_netns_cluster.c netns_util.c cluster_digest.c LABELS e2e)
target_link_libraries(test_netns_cluster PRIVATE PkgConfig::SQLITE3)
add_dependencies(test_netns_cluster tallyd tally_cli)

# One cap across three hosts in network namespaces of their own (clients over each tallyd's
# Unix socket): at most 1,000 of a plan of 1,000, every refusal naming the plan; kill -9 of
# every process of the leader's host (a new leader grants within 2 s, the old host's ledger
# copies equal the others' within 5 s of its restart); the leader's data dir wiped and joined
# again from a snapshot. Every member's ledger copies compared (cluster_digest.c). Skipped,
# with the reason, where namespaces cannot be made.
tally_add_test(test_netns_cluster_cap test_netns_cluster_cap.c netns_util.c cluster_digest.c
               LABELS e2e)
target_link_libraries(test_netns_cluster_cap PRIVATE tally_proto PkgConfig::SQLITE3)
add_dependencies(test_netns_cluster_cap tallyd tally_cli)

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

# Delay and loss between hosts: nfq_delay (tools/nfq_delay.c), a test tool never installed,
# holds the packets an iptables NFQUEUE rule hands it (this kernel has no netem), and
# test_netns_cluster_delay runs three hosts' clients for three minutes through it (every window
# at most its cap, the grants' p99, the ledger copies equal). Skipped, with the reason, without
# namespaces, iptables' NFQUEUE or nfq_delay (libnetfilter_queue missing).
pkg_check_modules(NFQ IMPORTED_TARGET libnetfilter_queue)
find_package(Threads REQUIRED)
tally_add_test(test_netns_cluster_delay test_netns_cluster_delay.c netns_util.c netns_delay.c
               netns_delay_client.c
               grant_figures.c cluster_digest.c
               LABELS e2e slow)
target_link_libraries(test_netns_cluster_delay PRIVATE tally_proto PkgConfig::SQLITE3
                      Threads::Threads)
add_dependencies(test_netns_cluster_delay tallyd tally_cli)
set_tests_properties(test_netns_cluster_delay PROPERTIES TIMEOUT 600)
if(NFQ_FOUND)
    add_executable(nfq_delay tools/nfq_delay.c)
    target_link_libraries(nfq_delay PRIVATE PkgConfig::NFQ tally_warnings)
    add_dependencies(test_netns_cluster_delay nfq_delay)
    target_compile_definitions(test_netns_cluster_delay PRIVATE
                               NFQ_DELAY_BIN="$<TARGET_FILE:nfq_delay>")
endif()

# One host's clock 2 s ahead (libfaketime) while leadership moves across namespaces: the skew
# reported, every window at most its cap, window ids never back in any copy of the ledger.
tally_add_test(test_netns_cluster_clock test_netns_cluster_clock.c netns_util.c cluster_digest.c
               LABELS e2e)
target_link_libraries(test_netns_cluster_clock PRIVATE tally_ledger_internal PkgConfig::SQLITE3)
add_dependencies(test_netns_cluster_clock tallyd tally_cli)
