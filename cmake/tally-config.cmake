# find_package(tally): imports tally::client (libtally.so.0, tally.h).
include("${CMAKE_CURRENT_LIST_DIR}/tally-targets.cmake")
