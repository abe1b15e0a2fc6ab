# examples/: each example run against the real servers (tallyd, nginx, caddy,
# the installed libtally), with the environment of examples_env.c.
add_library(tally_examples_env STATIC examples_env.c)
target_include_directories(tally_examples_env PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(tally_examples_env PUBLIC tally_test_support PkgConfig::CMOCKA
                      PRIVATE tally_warnings)

foreach(ex nginx caddy)
    tally_add_test(test_examples_${ex} test_examples_${ex}.c LABELS e2e)
    target_link_libraries(test_examples_${ex} PRIVATE tally_examples_env)
    add_dependencies(test_examples_${ex} tallyd tally_cli)
    set_tests_properties(test_examples_${ex} PROPERTIES TIMEOUT 120)
endforeach()

# make install's result, used as a user would (pkg-config, the installed binaries).
tally_add_test(test_examples_install test_examples_install.c LABELS e2e)
target_link_libraries(test_examples_install PRIVATE tally_examples_env)
add_dependencies(test_examples_install tallyd tally_cli tally_client)
if(TALLY_SANITIZE)
    set(TALLY_EXAMPLE_SAN_FLAGS "-fsanitize=${TALLY_SANITIZE} -fno-omit-frame-pointer")
else()
    set(TALLY_EXAMPLE_SAN_FLAGS "")
endif()
target_compile_definitions(test_examples_install PRIVATE
    TALLY_CMAKE="${CMAKE_COMMAND}"
    TALLY_CC="${CMAKE_C_COMPILER}"
    TALLY_SANITIZE_FLAGS="${TALLY_EXAMPLE_SAN_FLAGS}"
    TALLY_INSTALL_PREFIX="${CMAKE_INSTALL_PREFIX}"
    TALLY_INSTALL_BINDIR="${CMAKE_INSTALL_FULL_BINDIR}"
    TALLY_INSTALL_LIBDIR="${CMAKE_INSTALL_FULL_LIBDIR}"
    TALLY_INSTALL_INCLUDEDIR="${CMAKE_INSTALL_FULL_INCLUDEDIR}")
set_tests_properties(test_examples_install PROPERTIES TIMEOUT 180)
