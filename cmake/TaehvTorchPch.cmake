# taehv_torch_pch(TARGETS <target>...): the targets' C++ files start from one precompiled <torch/torch.h> (GCC only;
# option TAEHV_TORCH_PCH, default ON). Parsing that header is half of a trainer file's compile time: 13 of 28 s for
# trainer/train/src/commands.cc on a 2-core host, of which ~10 s is the header itself (the rest, libtorch's templates
# instantiated at the end of every file, a precompiled header cannot save).
#
# Two headers are precompiled, once each, and reused by every target (REUSE_FROM): GCC takes a precompiled header only
# where the compile's position-independence, language standard and every macro of its build match, so libraries
# (-fPIC) and executables (-fPIE) need one each. Both are built with libtorch's own usage requirements (its include
# folders and definitions, the same for every target that links it) and C++20 (trainer/CMakeLists.txt); a target that
# differed would get GCC's -Winvalid-pch warning and compile from the header as before, never wrongly.
#
# ccache: the precompiled header is a ~700 MB file that differs at every build, so ccache (CMakeLists.txt's launcher)
# would miss on every file that uses it. It is told to hash a checksum beside it instead (pch_external_checksum,
# CCACHE_PCH_EXTSUM: <header>.gch.sum), written here at configure time from what the header is made of: the
# compiler, the flags and definitions, and libtorch's build (torch/version.py). The header itself is not cached (the
# producers' launcher is empty): each costs ~40 s of one core per build folder, and ~8 s more for the producer's own
# empty file.
#
# Files of a listed target that do not include libtorch are left out by name (SKIP_PRECOMPILE_HEADERS at their
# target), since a precompiled header still costs ~8 s to a file that never needed it; so are files compiled with
# flags of their own that change the header's macros (GCC would refuse the header there and warn).
option(TAEHV_TORCH_PCH "Precompile <torch/torch.h> once for the trainer's targets (GCC)" ON)

function(taehv_torch_pch_producer name pic_flag)
  set(dir "${PROJECT_BINARY_DIR}/torch_pch")
  file(CONFIGURE OUTPUT "${dir}/${name}.cc"  # written only when it changes: each build of it is ~8 s
       CONTENT "// The precompiled <torch/torch.h> of cmake/TaehvTorchPch.cmake (${pic_flag}).\n")
  add_library(${name} OBJECT "${dir}/${name}.cc")
  target_link_libraries(${name} PRIVATE ${TORCH_LIBRARIES})
  target_compile_features(${name} PRIVATE cxx_std_20)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF CXX_COMPILER_LAUNCHER "")
  target_compile_options(${name} PRIVATE ${pic_flag})
  taehv_enable_warnings(${name})  # -Wpedantic changes the header's macros (__cpp_runtime_arrays): the same as the users'
  target_precompile_headers(${name} PRIVATE <torch/torch.h>)
  # What the header is made of, for ccache's pch_external_checksum (see above); ccache hashes this text.
  string(TOUPPER "${CMAKE_BUILD_TYPE}" build_type)
  # torch/version.py names the wheel's build (version, git commit, CUDA); no path goes in, so that ccache's base_dir
  # lets clones of the tree share the cache. A libtorch without it (the C++ zip) gets no checksum: ccache then hashes
  # the header itself and misses, never wrongly hits.
  set(sum_file "${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/${name}.dir/cmake_pch.hxx.gch.sum")
  if(NOT EXISTS "${TORCH_INSTALL_PREFIX}/version.py")
    file(REMOVE "${sum_file}")
    return()
  endif()
  file(READ "${TORCH_INSTALL_PREFIX}/version.py" torch_build)
  file(GENERATE OUTPUT "${sum_file}" CONTENT
"${CMAKE_CXX_COMPILER} ${CMAKE_CXX_COMPILER_VERSION}
${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${build_type}} ${pic_flag} ${TORCH_CXX_FLAGS}
$<TARGET_PROPERTY:${name},COMPILE_OPTIONS>
$<TARGET_PROPERTY:${name},COMPILE_DEFINITIONS>
${torch_build}")
endfunction()

# taehv_torch_pch(TARGETS <target>... [SKIP <target> <file>...]): SKIP names a target's files that do not include
# libtorch (paths relative to that target's folder), one target per SKIP.
function(taehv_torch_pch)
  if(NOT TAEHV_TORCH_PCH OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 0 P "" "" "TARGETS;SKIP")
  foreach(target IN LISTS P_TARGETS)
    if(NOT TARGET ${target})
      continue()  # a test suite this configuration does not build
    endif()
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      set(producer taehv_torch_pch_pie)
      set(flag -fPIE)
    else()
      set(producer taehv_torch_pch_pic)
      set(flag -fPIC)
    endif()
    if(NOT TARGET ${producer})
      taehv_torch_pch_producer(${producer} ${flag})
    endif()
    target_precompile_headers(${target} REUSE_FROM ${producer})
  endforeach()
  if(P_SKIP)
    list(POP_FRONT P_SKIP target)
    if(TARGET ${target})
      get_target_property(dir ${target} SOURCE_DIR)
      list(TRANSFORM P_SKIP PREPEND "${dir}/")
      set_source_files_properties(${P_SKIP} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endif()
endfunction()
