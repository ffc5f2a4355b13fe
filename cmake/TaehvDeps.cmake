# The offline dependency bundle (scripts/bundle-deps.sh): -DTAEHV_DEPS=<folder> makes every find_package of the build
# look there first, so a machine without the -dev packages (a stock PyTorch GPU image) builds with it. Refused, with
# one message naming what was found and what is needed, when it is no bundle, was made for another CPU, or needs a
# newer glibc than this machine's.
set(TAEHV_DEPS "" CACHE PATH "Offline dependency bundle made by scripts/bundle-deps.sh (empty: the system's packages)")
if(NOT TAEHV_DEPS)
  return()
endif()
get_filename_component(TAEHV_DEPS "${TAEHV_DEPS}" ABSOLUTE)
if(NOT EXISTS "${TAEHV_DEPS}/taehv-deps.cmake")
  message(FATAL_ERROR "TAEHV_DEPS=${TAEHV_DEPS} is not a dependency bundle (it has no taehv-deps.cmake): make one with "
                      "scripts/bundle-deps.sh on a machine set up by scripts/setup.sh, and point -DTAEHV_DEPS at it.")
endif()
include("${TAEHV_DEPS}/taehv-deps.cmake")
if(NOT TAEHV_DEPS_FORMAT EQUAL 1)
  message(FATAL_ERROR "The bundle in ${TAEHV_DEPS} has format '${TAEHV_DEPS_FORMAT}'; this checkout reads format 1: "
                      "remake it with this checkout's scripts/bundle-deps.sh.")
endif()
if(NOT TAEHV_DEPS_PROCESSOR STREQUAL CMAKE_HOST_SYSTEM_PROCESSOR)
  message(FATAL_ERROR "The bundle in ${TAEHV_DEPS} holds ${TAEHV_DEPS_PROCESSOR} libraries; this machine is "
                      "${CMAKE_HOST_SYSTEM_PROCESSOR}: make the bundle on a ${CMAKE_HOST_SYSTEM_PROCESSOR} machine.")
endif()
# Libraries linked against a glibc load only on that glibc or a newer one.
execute_process(COMMAND ldd --version OUTPUT_VARIABLE taehv_ldd_version ERROR_QUIET)
string(REGEX MATCH "[0-9]+\\.[0-9]+" taehv_glibc "${taehv_ldd_version}")
if(taehv_glibc AND taehv_glibc VERSION_LESS TAEHV_DEPS_GLIBC)
  message(FATAL_ERROR "The bundle in ${TAEHV_DEPS} was made against glibc ${TAEHV_DEPS_GLIBC}; this machine has glibc "
                      "${taehv_glibc}, on which its libraries do not load: make the bundle on a machine with glibc "
                      "<= ${taehv_glibc} (Debian 12 has 2.36).")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${TAEHV_DEPS}")
set(OPENSSL_ROOT_DIR "${TAEHV_DEPS}")
set(CMAKE_LIBRARY_ARCHITECTURE "${TAEHV_DEPS_MULTIARCH}")  # the bundle's lib/<multiarch>/, whatever the compiler says
message(STATUS "taehv: dependencies from the bundle ${TAEHV_DEPS} (glibc ${TAEHV_DEPS_GLIBC}, ${TAEHV_DEPS_PROCESSOR})")
# The programs find the bundle's libraries through their RPATH, and libspdlog needs libfmt.so.9, which is also only in
# the bundle. The linker's default DT_RUNPATH serves a program's own libraries, not theirs: on a machine without
# libfmt, every program linking spdlog (taehv-run, taehv-train, the tests) failed to start with "libfmt.so.9: cannot
# open shared object file". DT_RPATH serves the libraries' libraries too.
add_link_options("LINKER:--disable-new-dtags")
