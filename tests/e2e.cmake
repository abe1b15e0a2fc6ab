# End to end with the real processes: tallyd, child counters, supervisors.
tally_add_test(test_e2e_leases test_e2e_leases.c LABELS e2e slow)
target_link_libraries(test_e2e_leases PRIVATE tally_ledger_internal tally_child_internal tally_proto PkgConfig::SQLITE3)
add_dependencies(test_e2e_leases tallyd tally_cli)
set_tests_properties(test_e2e_leases PROPERTIES TIMEOUT 900)

# A lowered limit in force before `tally` returns: endpoint, plan, per-link, smaller plan.
tally_add_test(test_e2e_limits test_e2e_limits.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_limits tallyd tally_cli)

# Every endpoint a tenant may have, each called: every child counter a holder, across a restart.
tally_add_test(test_e2e_endpoints test_e2e_endpoints.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_endpoints tallyd tally_cli)

# Endpoints keyed by caller: sign-in per address and account, bad callers, keyed hashes
# only, kill -9 and SIGSTOP of the caller authorities.
tally_add_test(test_e2e_callers test_e2e_callers.c serve_util.c LABELS e2e)
target_link_libraries(test_e2e_callers PRIVATE tally_proto)
add_dependencies(test_e2e_callers tallyd tally_cli)
# 100,000 distinct callers and a flood past --max-callers, pipelined.
tally_add_test(test_e2e_callers_flood test_e2e_callers_flood.c serve_util.c LABELS e2e)
target_link_libraries(test_e2e_callers_flood PRIVATE tally_proto)
add_dependencies(test_e2e_callers_flood tallyd tally_cli)

# Calendar-month quotas: Retry-After to the billing boundary, a new billing day, bad input.
tally_add_test(test_e2e_month test_e2e_month.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_month tallyd tally_cli)

# Per-tenant overrides: one tenant doubled, show, export/apply, reset, bad input.
tally_add_test(test_e2e_overrides test_e2e_overrides.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_overrides tallyd tally_cli)

# tally usage: matches what clients counted, zeros, the previous window, kill -9 of tallyd.
tally_add_test(test_e2e_usage test_e2e_usage.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_usage tallyd tally_cli)
