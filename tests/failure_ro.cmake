# Failure modes, second group (docs/FAILURE-MODES.md §1): a read-only data
# dir (bind mounts made by the test: root) and what --durability batched loses
# to a power loss, simulated by the power-loss hook (store/powerloss_vfs.c).
find_package(Threads REQUIRED)
foreach(t test_fail_readonly test_fail_batched)
    tally_add_test(${t} ${t}.c fail_util.c serve_util.c)
    target_link_libraries(${t} PRIVATE tally_proto PkgConfig::SQLITE3 Threads::Threads)
    add_dependencies(${t} tallyd tally_cli)
    set_tests_properties(${t} PROPERTIES TIMEOUT 600)
endforeach()
# The power-loss hook itself and store_db_sync(), on real files with real SIGKILL.
tally_add_test(test_store_powerloss test_store_powerloss.c)
