# Failure modes through the real processes (docs/FAILURE-MODES.md §1): a full
# disk on a small tmpfs (mounted by the test: root), corrupted SQLite files, a
# stopped supervisor under steady load, and noise that must create nothing.
find_package(Threads REQUIRED)
foreach(t test_fail_disk test_fail_corrupt test_fail_stop test_fail_noise)
    tally_add_test(${t} ${t}.c fail_util.c serve_util.c LABELS e2e)
    target_link_libraries(${t} PRIVATE tally_proto PkgConfig::SQLITE3 Threads::Threads)
    add_dependencies(${t} tallyd tally_cli)
    set_tests_properties(${t} PROPERTIES TIMEOUT 600)
endforeach()
