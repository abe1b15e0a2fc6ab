# Failure modes, second group (docs/FAILURE-MODES.md §1): a read-only data
# dir (bind mounts made by the test: root) and what --durability batched loses
# to a power loss, simulated by the power-loss hook (support/powerloss_vfs.c) in a
# test build of the daemon, tallyd_powerloss.
find_package(Threads REQUIRED)

add_library(tally_test_powerloss STATIC support/powerloss_vfs.c)
target_include_directories(tally_test_powerloss PUBLIC support)
target_link_libraries(tally_test_powerloss PUBLIC tally_store PkgConfig::SQLITE3
                      PRIVATE tally_warnings)

# tallyd with the shim as the VFS of its private files; tests only, never installed.
add_executable(tallyd_powerloss support/tallyd_powerloss.c ${PROJECT_SOURCE_DIR}/cli/tallyd.c
               ${PROJECT_SOURCE_DIR}/cli/tallyd_args.c)
target_include_directories(tallyd_powerloss PRIVATE ${PROJECT_SOURCE_DIR}/cli)
target_link_libraries(tallyd_powerloss PRIVATE tally_test_powerloss tally_front tally_ledger tally_callers
                      tally_proto tally_store tally_tenant tally_warnings)
target_compile_definitions(tallyd_powerloss PRIVATE
                           TALLY_DEFAULT_DATA_DIR="${TALLY_DEFAULT_DATA_DIR}"
                           TALLY_VERSION="${PROJECT_VERSION}")

foreach(t test_fail_readonly test_fail_batched)
    tally_add_test(${t} ${t}.c fail_util.c serve_util.c LABELS e2e)
    target_link_libraries(${t} PRIVATE tally_proto PkgConfig::SQLITE3 Threads::Threads)
    add_dependencies(${t} tallyd tally_cli)
    set_tests_properties(${t} PROPERTIES TIMEOUT 600)
endforeach()
set_property(TEST test_fail_batched APPEND PROPERTY LABELS slow) # about 55 s under ASan
add_dependencies(test_fail_batched tallyd_powerloss)
target_compile_definitions(test_fail_batched PRIVATE
                           TALLYD_POWERLOSS="$<TARGET_FILE:tallyd_powerloss>")
# The power-loss hook itself and store_db_sync(), on real files with real SIGKILL.
tally_add_test(test_store_powerloss test_store_powerloss.c LABELS unit)
target_link_libraries(test_store_powerloss PRIVATE tally_test_powerloss)
# A new child's first answers wait for its incarnation to be durable (slow child-file syncs).
tally_add_test(test_fail_first_answer test_fail_first_answer.c serve_util.c LABELS e2e)
target_link_libraries(test_fail_first_answer PRIVATE tally_proto PkgConfig::SQLITE3 Threads::Threads)
add_dependencies(test_fail_first_answer tallyd tally_cli tallyd_powerloss)
target_compile_definitions(test_fail_first_answer PRIVATE
                           TALLYD_POWERLOSS="$<TARGET_FILE:tallyd_powerloss>")
