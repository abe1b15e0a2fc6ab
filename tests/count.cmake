# The counting core (tenant_count.h): seeded property suites; TALLY_SEED=N replays a run.
tally_add_test(test_tenant_window test_tenant_window.c LABELS unit)
tally_add_test(test_tenant_month test_tenant_month.c LABELS unit)
tally_add_test(test_tenant_gcra test_tenant_gcra.c LABELS unit)
tally_add_test(test_tenant_slots test_tenant_slots.c LABELS unit)
tally_add_test(test_tenant_path test_tenant_path.c LABELS unit)
tally_add_test(test_tenant_callers test_tenant_callers.c LABELS unit)
