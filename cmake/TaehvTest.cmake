# taehv_add_gtest(<name> SOURCES ... [LIBRARIES ...] [LABELS ...] [TIMEOUT s] [RESOURCE_LOCK name])
# One GoogleTest executable; each TEST becomes a ctest test (gtest_discover_tests) carrying LABELS.
# Labels in use: unit (fast, no infrastructure), integration (real processes, loopback),
# slow (real SLURM / sshd in network namespaces; run alone with `ctest -L slow`), hostile (below), fuzz (every
# libFuzzer target for a bounded time: tests/fuzz_test.sh).
# The standing hostile suite: every test whose name holds "Hostile" (suites HostileArea.Sentence, instantiations
# Name/HostileArea.Sentence/0) also carries the label `hostile`, beside its own, so `ctest -L hostile` and
# `ctest -R Hostile` select the same tests, each registered once. GoogleTest names are only known once a suite is
# built (gtest_discover_tests writes them into ctest's files): a ctest include file read after the discovered list
# adds the label there. Tests made by add_test in a folder that has a suite get it at the end of configuring it.
# Every test sees TAEHV_SHARED_DIR (../shared), TAEHV_BIN_DIR (taehv-run, taehv-train),
# TAEHV_PLUGIN_DIR (built plugins) and TAEHV_SOURCE_DIR in its environment. The programs' folder and whether this
# build has the trainer and FFmpeg are also compiled in (TAEHV_TEST_BIN_DIR, relative to the test's program;
# TAEHV_TEST_WITH_TRAINER, TAEHV_TEST_WITH_FFMPEG), so that a test run outside ctest finds them too and fails, never
# skips, when a program it needs is missing; only a build made without FFmpeg skips the tests of video files
# (TAEHV_REQUIRE_VIDEO_FILES).
# RESOURCE_LOCK: ctest runs no two tests holding the same lock at once (fixed namespaces, ports, ...).

# taehv_test_path(<target> <MACRO> <path>): compiles in <path> relative to the folder of the target's program
# (its RUNTIME_OUTPUT_DIRECTORY, set before the call), e.g. "../bin"; tests/infra/built_programs.h's
# besideThisTest(MACRO) makes it absolute again at run time. The object file is then the same in every clone of the
# tree, so ccache serves another clone's build (CI's fresh one) what this one compiled; an absolute path in a macro
# made every test file miss there.
function(taehv_test_path target macro path)
  get_target_property(program_dir ${target} RUNTIME_OUTPUT_DIRECTORY)
  if(NOT program_dir)
    message(FATAL_ERROR "taehv_test_path(${target}): set its RUNTIME_OUTPUT_DIRECTORY first")
  endif()
  file(RELATIVE_PATH relative "${program_dir}" "${path}")
  if(relative STREQUAL "")
    set(relative ".")
  endif()
  target_compile_definitions(${target} PRIVATE ${macro}="${relative}")
endfunction()

# taehv_test_knows_programs(<target>): compiles in where this build's programs are and whether it has the trainer,
# for tests/infra/built_programs.h (taehv_add_gtest does it for every suite).
function(taehv_test_knows_programs target)
  taehv_test_path(${target} TAEHV_TEST_BIN_DIR "${PROJECT_BINARY_DIR}/bin")
  target_compile_definitions(${target} PRIVATE
    TAEHV_TEST_WITH_TRAINER=$<BOOL:${TAEHV_WITH_TRAINER}> TAEHV_TEST_WITH_FFMPEG=$<BOOL:${TAEHV_WITH_FFMPEG}>)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
endfunction()

function(taehv_add_gtest name)
  cmake_parse_arguments(T "" "TIMEOUT;RESOURCE_LOCK" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main Threads::Threads ${T_LIBRARIES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tests")
  taehv_test_knows_programs(${name})
  taehv_enable_warnings(${name})
  # The environment goes through `env` as the test's launcher: gtest_discover_tests splits a multi-variable
  # ENVIRONMENT property at its semicolons, so only the first variable would reach the tests.
  set_target_properties(${name} PROPERTIES CROSSCOMPILING_EMULATOR
    "/usr/bin/env;TAEHV_SHARED_DIR=${TAEHV_SHARED_DIR};TAEHV_BIN_DIR=${PROJECT_BINARY_DIR}/bin;TAEHV_PLUGIN_DIR=${TAEHV_PLUGIN_OUTPUT_DIR};TAEHV_SOURCE_DIR=${PROJECT_SOURCE_DIR};TAEHV_BUILD_DIR=${PROJECT_BINARY_DIR}")
  set(lock_properties "")
  if(T_RESOURCE_LOCK)
    set(lock_properties RESOURCE_LOCK ${T_RESOURCE_LOCK})
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    TEST_LIST ${name}_discovered
    PROPERTIES
      LABELS "${T_LABELS}"
      TIMEOUT ${T_TIMEOUT}
      ${lock_properties})
  # Read by ctest after the discovered tests (gtest_discover_tests appended its include file first): one
  # set_tests_properties per hostile test, its labels and `hostile` (only LABELS: the other properties stay).
  set(hostile_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_hostile_label.cmake")
  file(WRITE "${hostile_file}"
    "foreach(test IN LISTS ${name}_discovered)\n"
    "  if(test MATCHES \"Hostile\")\n"
    "    set_tests_properties(\"\${test}\" PROPERTIES LABELS \"${T_LABELS};hostile\")\n"
    "  endif()\n"
    "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${hostile_file}")
  get_property(deferred DIRECTORY PROPERTY TAEHV_HOSTILE_LABEL_DEFERRED)
  if(NOT deferred)
    set_property(DIRECTORY PROPERTY TAEHV_HOSTILE_LABEL_DEFERRED ON)
    cmake_language(DEFER CALL taehv_label_hostile_script_tests)
  endif()
endfunction()

# The add_test tests of this folder whose name holds "Hostile" get the label `hostile` beside their own (called at
# the end of each folder that has a GoogleTest suite, when its add_test calls are all made).
function(taehv_label_hostile_script_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    if(test MATCHES "Hostile")
      get_test_property(${test} LABELS labels)
      if(NOT labels)
        set(labels "")
      endif()
      if(NOT "hostile" IN_LIST labels)
        set_property(TEST ${test} APPEND PROPERTY LABELS hostile)
      endif()
    endif()
  endforeach()
endfunction()
