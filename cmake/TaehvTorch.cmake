# Finds the libtorch the trainer builds against and checks that it is one taehv-train can use. Each refusal is one
# configure-time message naming what was found and what is needed.
#
# Which libtorch, the first of: -DTorch_DIR=<libtorch>/share/cmake/Torch; a libtorch in CMAKE_PREFIX_PATH; the one in
# the project's Python environment (.venv/, made by scripts/setup.sh: torch 2.13.0, CPU); the torch of the python3 on
# PATH (a PyTorch image's or a user's virtual environment: any torch 2.x from 2.9 on, CPU or CUDA 12/13).
# scripts/build-cuda.sh points Torch_DIR at .venv-cuda/ (torch 2.14.1, CUDA 13).
#
# Sets: TAEHV_TORCH_CUDA (ON for a CUDA libtorch), TAEHV_CUDA_VERSION ("13.0", or "none").
set(TAEHV_MIN_TORCH_VERSION 2.9)

# (FORCE below: an empty -DTorch_DIR= is a cache entry that a plain set(... CACHE) would keep.)
if(NOT Torch_DIR)
  find_path(taehv_prefix_torch TorchConfig.cmake PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES share/cmake/Torch
            NO_DEFAULT_PATH NO_CACHE)
  file(GLOB taehv_venv_torch "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch/share/cmake/Torch")
  if(taehv_prefix_torch)
    set(Torch_DIR "${taehv_prefix_torch}" CACHE PATH "Folder with TorchConfig.cmake (from CMAKE_PREFIX_PATH)" FORCE)
  elseif(taehv_venv_torch)
    list(GET taehv_venv_torch 0 taehv_venv_torch)
    set(Torch_DIR "${taehv_venv_torch}" CACHE PATH "Folder with TorchConfig.cmake (default: the one in .venv/)" FORCE)
  else()
    find_program(TAEHV_PATH_PYTHON3 python3 DOC "The python3 whose torch the trainer builds against")
    if(NOT TAEHV_PATH_PYTHON3)
      message(FATAL_ERROR "No libtorch found: no -DTorch_DIR, no .venv/ (scripts/setup.sh makes it) and no python3 on "
                          "PATH to ask for its torch. Put a python3 with torch >= ${TAEHV_MIN_TORCH_VERSION} on PATH, "
                          "run scripts/setup.sh, or configure with -DTAEHV_WITH_TRAINER=OFF to build the launcher "
                          "alone.")
    endif()
    execute_process(
      COMMAND "${TAEHV_PATH_PYTHON3}" -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
      OUTPUT_VARIABLE taehv_python_torch ERROR_VARIABLE taehv_python_error RESULT_VARIABLE taehv_python_rc
      OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT taehv_python_rc EQUAL 0)
      string(REGEX MATCH "[^\n]+\n?$" taehv_python_error "${taehv_python_error}")
      string(STRIP "${taehv_python_error}" taehv_python_error)
      message(FATAL_ERROR "The python3 on PATH (${TAEHV_PATH_PYTHON3}) has no usable torch ('import torch' said: "
                          "${taehv_python_error}). Install torch >= ${TAEHV_MIN_TORCH_VERSION} into it, run "
                          "scripts/setup.sh (torch 2.13.0 in .venv/), or point -DTorch_DIR at a libtorch.")
    endif()
    string(REPLACE "\n" ";" taehv_python_torch "${taehv_python_torch}")
    list(GET taehv_python_torch 0 taehv_python_prefix)
    list(GET taehv_python_torch 1 taehv_python_torch_version)
    set(Torch_DIR "${taehv_python_prefix}/Torch" CACHE PATH
        "Folder with TorchConfig.cmake (from the python3 on PATH: torch ${taehv_python_torch_version})" FORCE)
    message(STATUS "taehv-train: libtorch of the python3 on PATH (${TAEHV_PATH_PYTHON3}, torch "
                   "${taehv_python_torch_version})")
  endif()
endif()

# A CUDA libtorch (libtorch_cuda.so beside libtorch.so) configures only with a CUDA toolkit (its package looks for
# nvcc and the CUDA headers); look first so that a missing toolkit is named here, not deep inside Caffe2's files.
set(TAEHV_TORCH_CUDA OFF)
set(TAEHV_CUDA_VERSION none)
if(Torch_DIR)
  get_filename_component(taehv_torch_root "${Torch_DIR}/../../.." ABSOLUTE)
  if(EXISTS "${taehv_torch_root}/lib/libtorch_cuda.so")
    set(TAEHV_TORCH_CUDA ON)
    find_package(CUDAToolkit QUIET)
    if(NOT CUDAToolkit_FOUND)
      message(FATAL_ERROR "The libtorch in ${taehv_torch_root} is a CUDA build (lib/libtorch_cuda.so), and building "
                          "against it needs the CUDA toolkit (nvcc and the CUDA headers), which was not found. Install "
                          "the CUDA toolkit of that libtorch's CUDA version, or point -DCUDAToolkit_ROOT (or CUDA_HOME) "
                          "at it, or build against a CPU libtorch (scripts/setup.sh's .venv/).")
    endif()
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" TAEHV_CUDA_VERSION "${CUDAToolkit_VERSION}")
    # libtorch's package still uses CMake's old FindCUDA, which guesses the toolkit from the nvcc on PATH (wrong
    # when that is a wrapper script outside the toolkit); hand it the toolkit FindCUDAToolkit found.
    if(NOT CUDA_TOOLKIT_ROOT_DIR)
      get_filename_component(taehv_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
      set(CUDA_TOOLKIT_ROOT_DIR "${taehv_cuda_root}" CACHE PATH "CUDA toolkit, for libtorch's CUDA package")
    endif()
    # A wheel's CUDA libraries (NVRTC among them, which libtorch's targets link) come in the nvidia-* wheels beside
    # torch/, versioned only (libnvrtc.so.13); a toolkit without them leaves CUDA_nvrtc_LIBRARY unset.
    if(NOT CUDA_nvrtc_LIBRARY)
      file(GLOB taehv_wheel_nvrtc "${taehv_torch_root}/../nvidia/*/lib/libnvrtc.so.[0-9]*")
      if(taehv_wheel_nvrtc)
        list(GET taehv_wheel_nvrtc 0 taehv_wheel_nvrtc)
        set(CUDA_nvrtc_LIBRARY "${taehv_wheel_nvrtc}" CACHE FILEPATH "NVRTC (from the nvidia wheel beside torch/)" FORCE)
      endif()
    endif()
    if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
      set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}" CACHE FILEPATH "nvcc, for libtorch's CUDA package")
    endif()
  endif()
endif()

# Included from the top-level CMakeLists.txt, so Torch's imported targets are visible to trainer/ and tests/.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "No libtorch found. Run scripts/setup.sh (it puts torch 2.13.0 into .venv/, where this build "
                      "looks by default), or point -DTorch_DIR at a libtorch's share/cmake/Torch folder, or configure "
                      "with -DTAEHV_WITH_TRAINER=OFF to build the launcher alone.")
endif()
if(Torch_VERSION VERSION_LESS TAEHV_MIN_TORCH_VERSION)
  message(FATAL_ERROR "The libtorch in ${Torch_DIR} is ${Torch_VERSION}; taehv-train needs libtorch >= "
                      "${TAEHV_MIN_TORCH_VERSION} (built and tested with 2.11, 2.13 and 2.14). scripts/setup.sh "
                      "installs torch 2.13.0 into .venv/, which this build uses by default.")
endif()
# The torch target adds TORCH_CXX_FLAGS (-D_GLIBCXX_USE_CXX11_ABI=N) to whatever links it. With the old ABI
# (N=0: PyTorch pip wheels before 2.7, the "pre-cxx11" libtorch zips) std::string differs between the trainer
# and the libraries it shares types with (taehv::train_base, yaml-cpp), which fails at link time or worse.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR "The libtorch in ${Torch_DIR} uses the pre-C++11 libstdc++ ABI (${TORCH_CXX_FLAGS}); "
                      "taehv-train links libraries built with the C++11 ABI. Use a cxx11-ABI libtorch: PyTorch >= 2.7 "
                      "wheels or the 'cxx11 ABI' libtorch download.")
endif()
# c10d (TCPStore, ProcessGroupGloo) is what the trainer trains with; some libtorch builds leave it out
# (USE_DISTRIBUTED=OFF, e.g. mobile builds).
foreach(header TCPStore.hpp ProcessGroupGloo.hpp)
  find_file(taehv_c10d_header "torch/csrc/distributed/c10d/${header}" HINTS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH
            NO_CACHE)
  if(NOT taehv_c10d_header)
    message(FATAL_ERROR "The libtorch in ${Torch_DIR} (${Torch_VERSION}) has no c10d "
                        "(torch/csrc/distributed/c10d/${header} is not among its headers: built with "
                        "USE_DISTRIBUTED=OFF?). taehv-train needs c10d's TCPStore and Gloo: use a PyTorch wheel's or "
                        "the official libtorch download.")
  endif()
  unset(taehv_c10d_header)
endforeach()
# libtorch builds export a static copy of libstdc++'s std::filesystem from their libraries: PyPI's torch 2.11 from
# libtorch.so (64 functions) and libtorch_cpu.so (90), torch 2.13 from libtorch_cpu.so (90). A program that links
# libtorch before libstdc++ binds its own std::filesystem calls to that copy (LD_DEBUG=bindings: remove_all,
# path::_M_split_cmpts, temp_directory_path from libtorch_cpu.so), and libstdc++'s internal ones too: on an H200 with
# torch 2.11 the copy's remove_all jumped to address 0, and every test with a temporary folder died of SIGSEGV when
# removing it (so would taehv-train pruning old checkpoints). Where any of these libraries exports such functions,
# libstdc++.so must come first among every program's libraries, so that the C++ runtime's own functions are bound.
# How to get it there depends on the toolchain (on an H100 image whose g++ is a wrapper, /opt/gcc/bin/g++, the
# link option that works here left libstdc++ behind libtorch and 40 tests died so), so each way below is tried on a
# probe program linked against libtorch as the programs are, in order, and the first one whose program lists
# libstdc++ ahead of libtorch (readelf) and removes a folder tree without crashing is used for every program.
set(taehv_torch_std_fs_count 0)
set(taehv_torch_std_fs_libs "")
find_program(taehv_nm nm NO_CACHE)
foreach(taehv_lib torch torch_cpu)
  find_library(taehv_lib_so ${taehv_lib} HINTS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH NO_CACHE)
  if(taehv_lib_so AND taehv_nm)
    execute_process(COMMAND "${taehv_nm}" -D --defined-only "${taehv_lib_so}" OUTPUT_VARIABLE taehv_torch_symbols
                    ERROR_QUIET)
    string(REGEX MATCHALL " T _ZNSt10filesystem[^\n]*" taehv_torch_std_fs "${taehv_torch_symbols}")
    list(LENGTH taehv_torch_std_fs taehv_count)
    if(taehv_count GREATER 0)
      math(EXPR taehv_torch_std_fs_count "${taehv_torch_std_fs_count} + ${taehv_count}")
      list(APPEND taehv_torch_std_fs_libs "lib${taehv_lib}.so (${taehv_count})")
    endif()
  endif()
  unset(taehv_lib_so)
  unset(taehv_torch_symbols)
endforeach()
if(taehv_torch_std_fs_count GREATER 0)
  include(TaehvStdcxxFirst)
  list(JOIN taehv_torch_std_fs_libs ", " taehv_torch_std_fs_libs)
  taehv_find_stdcxx_first_option(taehv_stdcxx_first taehv_stdcxx_tried)
  if(taehv_stdcxx_first)
    add_link_options("${taehv_stdcxx_first}")
    message(STATUS "taehv-train: this libtorch exports std::filesystem functions of its own (${taehv_torch_std_fs_libs}): "
                   "libstdc++ is linked first (${taehv_stdcxx_first}), so programs use the C++ runtime's")
  else()
    message(WARNING "taehv-train: this libtorch exports std::filesystem functions of its own "
                    "(${taehv_torch_std_fs_libs}), and no way tried puts libstdc++ ahead of it with this toolchain "
                    "(${CMAKE_CXX_COMPILER}): ${taehv_stdcxx_tried}. Programs will call libtorch's copy, which crashed "
                    "in std::filesystem::remove_all with torch 2.11 (tests with temporary folders, taehv-train's "
                    "checkpoint.keep). The probe's link lines: ${CMAKE_BINARY_DIR}/taehv-stdcxx-probe.log. Use another "
                    "C++ compiler (-DCMAKE_CXX_COMPILER=/usr/bin/g++) or a libtorch without that copy.")
  endif()
endif()
