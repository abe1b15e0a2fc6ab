# The counting core (tenant_count.h): seeded property suites; TALLY_SEED=N replays a run.
tally_add_test(test_tenant_window test_tenant_window.c)
tally_add_test(test_tenant_gcra test_tenant_gcra.c)
tally_add_test(test_tenant_slots test_tenant_slots.c)
tally_add_test(test_tenant_path test_tenant_path.c)
