// Stand-in for the header CMake generates when libtorch is built with CUDA. Debian's CPU libtorch 1.13 ships
// c10/cuda/CUDAMacros.h (included by ProcessGroupNCCL.hpp) but not this file; the NCCL compile check
// (tests/trainer/train/CMakeLists.txt) only needs it to exist. Never part of a build that links.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
