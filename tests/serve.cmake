# tallyd as served: the log writer, shadow mode, /metrics and logs, TCP, the
# socket's mode and admin changes reaching the daemon. All but the first run the
# real tallyd, tally and supervisors (serve_util.c drives them).
tally_add_test(test_serve_log test_serve_log.c LABELS unit)

foreach(t test_serve_shadow test_serve_admin test_serve_stats)
    tally_add_test(${t} ${t}.c serve_util.c LABELS e2e)
    target_link_libraries(${t} PRIVATE tally_proto)
    add_dependencies(${t} tallyd tally_cli)
endforeach()
# /metrics and the event log, on one served tallyd set up alike (serve_obs_env.c).
foreach(t test_serve_metrics test_serve_events)
    tally_add_test(${t} ${t}.c serve_util.c serve_obs_env.c LABELS e2e)
    target_link_libraries(${t} PRIVATE tally_proto)
    add_dependencies(${t} tallyd tally_cli)
endforeach()

# tallyd's server in-process (sup_server_run on a thread of the suite, supervisors from
# the built tallyd): no allocation per decision from the socket read to the answer,
# over the binary protocol and HTTP.
find_package(Threads REQUIRED)
tally_add_test(test_serve_noalloc test_serve_noalloc.c serve_util.c LABELS e2e)
target_link_libraries(test_serve_noalloc PRIVATE tally_front tally_proto PkgConfig::SODIUM
                      Threads::Threads)
target_compile_definitions(test_serve_noalloc PRIVATE TALLYD_EXE="$<TARGET_FILE:tallyd>")
add_dependencies(test_serve_noalloc tallyd tally_cli)
