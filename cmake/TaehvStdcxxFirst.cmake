# taehv_find_stdcxx_first_option(<out> <tried>): the first link option (a SHELL: group or one -Wl token) that puts
# libstdc++ ahead of libtorch in a program linked against libtorch (TORCH_INSTALL_PREFIX) with this toolchain, or ""
# in <out>;
# <tried> gets one "option: what went wrong" per failed way. Used by TaehvTorch.cmake (why: see there).
#
# Each way builds a probe program with try_compile (the compiler, its wrapper and libtorch's libraries in the order
# its package gives the real programs) and accepts it when
#   - readelf lists libstdc++.so among the program's libraries ahead of every libtorch*/libc10* one, and
#   - the program, run, creates a folder tree and removes it with std::filesystem::remove_all (what crashed).
# The ways: the one that works with Debian's g++; the same as one linker token (a compiler wrapper that reorders or
# drops separate -l arguments passes a -Wl token on untouched); the C++ runtime's file by its path, both forms.
# Every probe's output, link line included (-v), goes to ${CMAKE_BINARY_DIR}/taehv-stdcxx-probe.log.
function(taehv_find_stdcxx_first_option out tried)
  set(probe_dir "${CMAKE_BINARY_DIR}/CMakeFiles/taehv-stdcxx-probe")
  set(log "${CMAKE_BINARY_DIR}/taehv-stdcxx-probe.log")
  file(WRITE "${probe_dir}/probe.cc" [=[
#include <filesystem>
#include <fstream>
int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2) return 2;
  const fs::path top = fs::path(argv[1]) / "tree";
  fs::create_directories(top / "a" / "b");
  std::ofstream(top / "a" / "b" / "file") << "x";
  std::error_code error;
  fs::remove_all(top, error);
  return error || fs::exists(top) ? 1 : 0;
}
]=])
  file(WRITE "${log}" "taehv: which link option puts libstdc++ ahead of libtorch (cmake/TaehvStdcxxFirst.cmake)\n")
  set(readelf "${CMAKE_READELF}")
  if(NOT readelf)
    find_program(readelf readelf NO_CACHE)
  endif()
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -print-file-name=libstdc++.so OUTPUT_VARIABLE runtime
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(ways "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state"
           "-Wl,--push-state,--no-as-needed,-lstdc++,--pop-state")
  if(IS_ABSOLUTE "${runtime}" AND EXISTS "${runtime}")
    get_filename_component(runtime "${runtime}" REALPATH)
    list(APPEND ways "SHELL:-Wl,--push-state,--no-as-needed ${runtime} -Wl,--pop-state"
                     "-Wl,--push-state,--no-as-needed,${runtime},--pop-state")
  endif()
  # libtorch's libraries as its package links them (libtorch_cpu and libtorch_cuda with --no-as-needed), by file:
  # its imported targets do not carry into a try_compile project (their links name protobuf::libprotobuf).
  set(lib "${TORCH_INSTALL_PREFIX}/lib")
  set(torch_libraries "${lib}/libtorch.so" "-Wl,--no-as-needed,${lib}/libtorch_cpu.so" -Wl,--as-needed)
  if(EXISTS "${lib}/libtorch_cuda.so")
    list(APPEND torch_libraries "-Wl,--no-as-needed,${lib}/libtorch_cuda.so" -Wl,--as-needed "${lib}/libc10_cuda.so")
  endif()
  list(APPEND torch_libraries "${lib}/libc10.so")
  set(failures "")
  set(index 0)
  foreach(way IN LISTS ways)
    math(EXPR index "${index} + 1")
    set(program "${probe_dir}/probe-${index}")
    file(REMOVE "${program}")
    try_compile(built "${probe_dir}/build-${index}" SOURCES "${probe_dir}/probe.cc"
                LINK_OPTIONS "${way}" -v
                LINK_LIBRARIES ${torch_libraries}
                CXX_STANDARD 17
                OUTPUT_VARIABLE output
                COPY_FILE "${program}")
    file(APPEND "${log}" "\n== ${way}\n${output}\n")
    if(NOT built OR NOT EXISTS "${program}")
      list(APPEND failures "${way}: the probe did not link")
      continue()
    endif()
    set(why "")
    if(readelf)
      execute_process(COMMAND "${readelf}" -d "${program}" OUTPUT_VARIABLE dynamic ERROR_QUIET)
      string(REGEX MATCHALL "Shared library: \\[[A-Za-z0-9_.+-]+\\]" needed "${dynamic}")
      string(REGEX REPLACE "Shared library: \\[([A-Za-z0-9_.+-]+)\\]" "\\1" needed "${needed}")
      file(APPEND "${log}" "libraries, in order: ${needed}\n")
      set(position 0)
      set(stdcxx_at -1)
      set(torch_at -1)
      foreach(library IN LISTS needed)
        if(library MATCHES "^libstdc\\+\\+\\.so" AND stdcxx_at EQUAL -1)
          set(stdcxx_at ${position})
        elseif(library MATCHES "^lib(torch|c10)" AND torch_at EQUAL -1)
          set(torch_at ${position})
        endif()
        math(EXPR position "${position} + 1")
      endforeach()
      if(stdcxx_at EQUAL -1)
        set(why "libstdc++.so is not among its libraries")
      elseif(NOT torch_at EQUAL -1 AND torch_at LESS stdcxx_at)
        list(GET needed ${torch_at} first_torch)
        set(why "libstdc++.so comes after ${first_torch}")
      endif()
    endif()
    if(NOT why)
      execute_process(COMMAND "${program}" "${probe_dir}" RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET
                      TIMEOUT 60)
      file(APPEND "${log}" "run: ${status}\n")
      if(NOT status STREQUAL "0")
        set(why "the probe's remove_all ended with '${status}'")
      endif()
    endif()
    if(NOT why)
      set(${out} "${way}" PARENT_SCOPE)
      set(${tried} "${failures}" PARENT_SCOPE)
      return()
    endif()
    file(APPEND "${log}" "refused: ${why}\n")
    list(APPEND failures "${way}: ${why}")
  endforeach()
  list(JOIN failures "; " failures)
  set(${out} "" PARENT_SCOPE)
  set(${tried} "${failures}" PARENT_SCOPE)
endfunction()
