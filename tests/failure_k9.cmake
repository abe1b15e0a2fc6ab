# kill -9 in a loop under load and tallyd's clean restart after kill -9 of
# itself (docs/FAILURE-MODES.md §1): the supervisor killed 20 times, tallyd 8
# times, an orphaned supervisor SIGSTOPped across a restart, a second tallyd.
find_package(Threads REQUIRED)
tally_add_test(test_fail_kill9 test_fail_kill9.c kill9_util.c fail_util.c serve_util.c LABELS e2e slow)
target_link_libraries(test_fail_kill9 PRIVATE tally_proto PkgConfig::SQLITE3 Threads::Threads)
add_dependencies(test_fail_kill9 tallyd tally_cli)
set_tests_properties(test_fail_kill9 PROPERTIES TIMEOUT 600)
