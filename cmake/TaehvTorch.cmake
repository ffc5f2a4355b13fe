# Finds the libtorch the trainer builds against and checks that it is one taehv-train can use. Each refusal is one
# configure-time message naming what was found and what is needed.
#
# Which libtorch: -DTorch_DIR=<libtorch>/share/cmake/Torch or CMAKE_PREFIX_PATH as usual; without either, the one in
# the project's Python environment (.venv/, made by scripts/setup.sh: torch 2.13.0, CPU). scripts/build-cuda.sh
# points Torch_DIR at .venv-cuda/ (torch 2.14.1, CUDA 13).
#
# Sets: TAEHV_TORCH_CUDA (ON for a CUDA libtorch), TAEHV_CUDA_VERSION ("13.0", or "none").
set(TAEHV_MIN_TORCH_VERSION 2.4)

if(NOT Torch_DIR AND NOT CMAKE_PREFIX_PATH)
  file(GLOB taehv_venv_torch "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch/share/cmake/Torch")
  if(taehv_venv_torch)
    list(GET taehv_venv_torch 0 taehv_venv_torch)
    set(Torch_DIR "${taehv_venv_torch}" CACHE PATH "Folder with TorchConfig.cmake (default: the one in .venv/)")
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
                      "${TAEHV_MIN_TORCH_VERSION} (c10d's Backend API, device-typed autocast). scripts/setup.sh "
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
