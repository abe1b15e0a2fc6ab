# Data at rest: the record codecs of the journal and of the child files, and the upgrade of
# files written by format 1 (tests/fixtures/v1) to today's format.
tally_add_test(test_sup_codec test_sup_codec.c LABELS unit)
target_link_libraries(test_sup_codec PRIVATE tally_ledger_internal tally_child_internal)

tally_add_test(test_store_upgrade test_store_upgrade.c upgrade_util.c LABELS unit)
target_link_libraries(test_store_upgrade PRIVATE tally_ledger_internal tally_child_internal
                      PkgConfig::SQLITE3)

tally_add_test(test_store_refuse test_store_refuse.c upgrade_util.c LABELS unit)
target_link_libraries(test_store_refuse PRIVATE tally_ledger_internal tally_child_internal
                      PkgConfig::SQLITE3)

# The same through the real tallyd: format-1 files served, newer files refused.
tally_add_test(test_e2e_upgrade test_e2e_upgrade.c serve_util.c LABELS e2e)
target_link_libraries(test_e2e_upgrade PRIVATE tally_proto PkgConfig::SQLITE3)
add_dependencies(test_e2e_upgrade tallyd tally_cli)

# New ledger and child files made ahead (DATA/pool) and taken by a rename.
tally_add_test(test_store_pool test_store_pool.c store_pool_util.c upgrade_util.c LABELS unit)
target_link_libraries(test_store_pool PRIVATE tally_ledger_internal tally_child_internal)
tally_add_test(test_store_pool_open test_store_pool_open.c store_pool_util.c upgrade_util.c
               LABELS unit)
target_link_libraries(test_store_pool_open PRIVATE tally_ledger_internal tally_child_internal)
