# Failure modes, second group (docs/FAILURE-MODES.md §1): a read-only data
# dir (bind mounts made by the test: root) and what --durability batched loses
# to a power loss, simulated by the power-loss hook (store/powerloss_vfs.c).
find_package(Threads REQUIRED)
foreach(t test_fail_readonly test_fail_batched)
    tally_add_test(${t} ${t}.c fail_util.c serve_util.c LABELS e2e)
    target_link_libraries(${t} PRIVATE tally_proto PkgConfig::SQLITE3 Threads::Threads)
    add_dependencies(${t} tallyd tally_cli)
    set_tests_properties(${t} PROPERTIES TIMEOUT 600)
endforeach()
set_property(TEST test_fail_batched APPEND PROPERTY LABELS slow) # about 55 s under ASan
# The power-loss hook itself and store_db_sync(), on real files with real SIGKILL.
tally_add_test(test_store_powerloss test_store_powerloss.c LABELS unit)
