# store/: SQLite files, migrations, statements, the data dir.
tally_add_test(test_store_db test_store_db.c LABELS unit)
target_link_libraries(test_store_db PRIVATE PkgConfig::SQLITE3 PkgConfig::SODIUM)
tally_add_test(test_store_use test_store_use.c LABELS unit)
tally_add_test(test_store_config_changes test_store_config_changes.c LABELS unit)
