# Supervisor starts through the real processes: 50 new tenants at once start side by
# side and are all admitted; the fork server killed with SIGKILL is survived.
find_package(Threads REQUIRED)
tally_add_test(test_fail_spawn test_fail_spawn.c kill9_util.c fail_util.c serve_util.c LABELS e2e)
target_link_libraries(test_fail_spawn PRIVATE tally_proto PkgConfig::SQLITE3 Threads::Threads)
add_dependencies(test_fail_spawn tallyd tally_cli)
set_tests_properties(test_fail_spawn PROPERTIES TIMEOUT 600)
