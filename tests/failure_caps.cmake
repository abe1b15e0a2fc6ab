# Bounded resources through the real processes (docs/FAILURE-MODES.md §2,
# "Bounded resources"): --max-supervisors (the least recently used hibernates,
# counts survive), --max-connections (binary and HTTP answers at the cap), and
# the per-tenant link and endpoint caps of `tally`.
find_package(Threads REQUIRED)
foreach(t test_fail_caps test_fail_conns)
    tally_add_test(${t} ${t}.c fail_util.c serve_util.c LABELS e2e)
    target_link_libraries(${t} PRIVATE tally_front_internal tally_proto PkgConfig::SQLITE3 Threads::Threads)
    add_dependencies(${t} tallyd tally_cli)
    set_tests_properties(${t} PROPERTIES TIMEOUT 600)
endforeach()
