# The lease protocol core: codec, supervisor ledger, child counter, and the deterministic
# simulation of docs/LEASE-PROTOCOL.md §7 (I1-I8). Seeded: TALLY_SEED=N replays a run;
# TALLY_SIM_SCHEDULES=N raises the number of simulated schedules.
tally_add_test(test_proto_lease test_proto_lease.c proto_lease_sample.c LABELS unit)
target_link_libraries(test_proto_lease PRIVATE tally_proto)

tally_add_test(test_sup_ledger test_sup_ledger.c sup_sim_fx.c LABELS unit)
target_link_libraries(test_sup_ledger PRIVATE tally_ledger_internal tally_child_internal)
tally_add_test(test_sup_ledger_links test_sup_ledger_links.c sup_sim_fx.c LABELS unit)
target_link_libraries(test_sup_ledger_links PRIVATE tally_ledger_internal tally_child_internal)
tally_add_test(test_sup_ledger_month test_sup_ledger_month.c sup_sim_fx.c LABELS unit)
target_link_libraries(test_sup_ledger_month PRIVATE tally_ledger_internal tally_child_internal)

tally_add_test(test_sup_ledger_keep test_sup_ledger_keep.c sup_sim_fx.c LABELS unit)
target_link_libraries(test_sup_ledger_keep PRIVATE tally_ledger_internal tally_child_internal)

tally_add_test(test_sup_journal test_sup_journal.c sup_sim_fx.c LABELS unit)
target_link_libraries(test_sup_journal PRIVATE tally_ledger_internal tally_child_internal)

tally_add_test(test_sup_child test_sup_child.c sup_sim_cx.c LABELS unit)
target_link_libraries(test_sup_child PRIVATE tally_child_internal)

tally_add_test(test_sup_child_hello test_sup_child_hello.c sup_sim_cx.c LABELS unit)
target_link_libraries(test_sup_child_hello PRIVATE tally_child_internal)

tally_add_test(test_sup_child_keep test_sup_child_keep.c sup_sim_cx.c LABELS unit)
target_link_libraries(test_sup_child_keep PRIVATE tally_child_internal)

tally_add_test(test_sup_child_durable test_sup_child_durable.c sup_sim_cx.c LABELS unit)
target_link_libraries(test_sup_child_durable PRIVATE tally_child_internal)

tally_add_test(test_sup_sim test_sup_sim.c sup_sim.c sup_sim_config.c sup_sim_child.c
               sup_sim_check.c sup_sim_end.c sup_sim_strand.c LABELS slow)
target_link_libraries(test_sup_sim PRIVATE tally_ledger_internal tally_child_internal)

# The same simulation with libraft's in-memory cluster (raft_fixture, 3 and 5 voters) as the
# supervisor's journal, as in cluster mode; partitions, kills, deposed leaders, disk faults.
tally_add_test(test_sup_sim_raft test_sup_sim_raft.c sup_sim_raft.c sup_sim_raft_members.c
               sup_sim_raft_faults.c sup_sim_raft_end.c sup_sim.c sup_sim_config.c
               sup_sim_child.c sup_sim_check.c sup_sim_end.c sup_sim_strand.c LABELS slow)
target_link_libraries(test_sup_sim_raft PRIVATE tally_ledger_internal tally_child_internal
                      PkgConfig::RAFT)
# A first turn on a real ledger file: what the supervisor replays, never under another's lock.
tally_add_test(test_sup_first_turn test_sup_first_turn.c sup_sim_fx.c LABELS unit)
target_link_libraries(test_sup_first_turn PRIVATE tally_ledger_internal tally_child_internal)
