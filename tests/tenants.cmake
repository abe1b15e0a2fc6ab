# Many tenants through the real tallyd: child files opened off the loop, idle
# children closing, descriptors bounded; a hot tenant's p99 with newcomers.
find_package(Threads REQUIRED)
tally_add_test(test_e2e_tenants test_e2e_tenants.c tenants_util.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_tenants tallyd tally_cli tally-bench tally-bench-links)
set_tests_properties(test_e2e_tenants PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
tally_add_test(test_e2e_newcomers test_e2e_newcomers.c tenants_util.c serve_util.c LABELS e2e)
target_link_libraries(test_e2e_newcomers PRIVATE Threads::Threads)
add_dependencies(test_e2e_newcomers tallyd tally_cli)
# Alone: its load (a hot tenant, hundreds of newcomers) would slow the suites that
# bound their answer times, and it measures latency itself.
set_tests_properties(test_e2e_newcomers PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
# The same with new tenants: each first request also starts a supervisor.
add_test(NAME test_e2e_tenants_spawns COMMAND test_e2e_newcomers spawns)
set_tests_properties(test_e2e_tenants_spawns PROPERTIES
    ENVIRONMENT "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1;TALLY_BIN=$<TARGET_FILE_DIR:tally_cli>"
    TIMEOUT 600 LABELS e2e RUN_SERIAL TRUE)
# Kept leases parked across idle closes: no supervisor for a quiet link, exact.
tally_add_test(test_e2e_park test_e2e_park.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_park tallyd tally_cli)
set_tests_properties(test_e2e_park PROPERTIES TIMEOUT 300)
# A quiet supervisor stops looking at tally.db and still misses no change.
tally_add_test(test_e2e_quiet test_e2e_quiet.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_quiet tallyd tally_cli)
set_tests_properties(test_e2e_quiet PROPERTIES TIMEOUT 120)
# First turns: a new tenant's first leases from tallyd, replayed by its supervisor; exact
# under a burst and across kill -9; never while another process holds the tenant's lock.
tally_add_test(test_e2e_first test_e2e_first.c tenants_util.c serve_util.c LABELS e2e)
add_dependencies(test_e2e_first tallyd tally_cli)
set_tests_properties(test_e2e_first PROPERTIES TIMEOUT 300)
