# examples/: each example run against the real servers (tallyd, nginx, caddy,
# the installed libtally), with the environment of examples_env.c.
add_library(tally_examples_env STATIC examples_env.c)
target_include_directories(tally_examples_env PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(tally_examples_env PUBLIC tally_test_support PkgConfig::CMOCKA
                      PRIVATE tally_warnings)

foreach(ex nginx caddy)
    tally_add_test(test_examples_${ex} test_examples_${ex}.c)
    target_link_libraries(test_examples_${ex} PRIVATE tally_examples_env)
    add_dependencies(test_examples_${ex} tallyd tally_cli)
    set_tests_properties(test_examples_${ex} PROPERTIES TIMEOUT 120)
endforeach()
