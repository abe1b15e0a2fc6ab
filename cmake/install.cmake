# Install rules (GNUInstallDirs): the two commands, libtally.so* with tally.h and
# tally_common.h, tally.pc, and a CMake package export (tally::client). Used by
# `make install PREFIX=... DESTDIR=...` and by the install suite
# (tests/test_examples_install.c), which builds examples/c against the result.
install(TARGETS tallyd tally_cli
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS tally_client EXPORT tally-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
                NAMELINK_COMPONENT Development
        PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/proto/tally.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(EXPORT tally-targets NAMESPACE tally::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tally)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/tally-config.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tally)
