# tallyd as served: the log writer, shadow mode, /metrics and logs, TCP, the
# socket's mode and admin changes reaching the daemon. All but the first run the
# real tallyd, tally and supervisors (serve_util.c drives them).
tally_add_test(test_serve_log test_serve_log.c LABELS unit)

foreach(t test_serve_shadow test_serve_metrics test_serve_admin test_serve_stats)
    tally_add_test(${t} ${t}.c serve_util.c LABELS e2e)
    target_link_libraries(${t} PRIVATE tally_proto)
    add_dependencies(${t} tallyd tally_cli)
endforeach()
