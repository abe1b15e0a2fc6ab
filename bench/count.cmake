# tally-bench-count: nanoseconds per decision for each counting algorithm (a program, not a test).
add_executable(tally-bench-count ${CMAKE_CURRENT_SOURCE_DIR}/bench_count.c)
target_link_libraries(tally-bench-count PRIVATE tally_tenant tally_warnings)
