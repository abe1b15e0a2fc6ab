# The `tally` command end to end, through the real binary.
tally_add_test(test_cli_admin test_cli_admin.c)
target_link_libraries(test_cli_admin PRIVATE PkgConfig::SQLITE3)
add_dependencies(test_cli_admin tally_cli)
tally_add_test(test_cli_check test_cli_check.c)
target_link_libraries(test_cli_check PRIVATE PkgConfig::SQLITE3)
add_dependencies(test_cli_check tally_cli)
tally_add_test(test_cli_apply test_cli_apply.c)
add_dependencies(test_cli_apply tally_cli)
