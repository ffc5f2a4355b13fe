// Internal: dlopen/dlsym helpers for the optional NVIDIA libraries (NVML, CUDA driver, NCCL).
#pragma once

#include <dlfcn.h>

#include <string>

namespace taehv::sizing::detail {

/// A dlopen'ed library. Never closed: the CUDA driver and NCCL start threads that must not lose their code,
/// and a handle costs nothing once the process has it.
class DynamicLibrary {
 public:
  /// Loads `name` (a soname looked up by the loader, or a path). error() tells why it failed.
  explicit DynamicLibrary(const std::string& name) {
    handle_ = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = ::dlerror();
      error_ = why != nullptr ? why : "dlopen failed";
    }
  }
  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }

  /// The symbol as a function pointer of type F, or nullptr.
  template <typename F>
  F symbol(const char* name) const {
    if (handle_ == nullptr) return nullptr;
    return reinterpret_cast<F>(::dlsym(handle_, name));
  }

 private:
  void* handle_ = nullptr;
  std::string error_;
};

/// True when dlerror() text means "file not there" (as opposed to "there but broken").
inline bool isNotFound(const std::string& dl_error) {
  return dl_error.find("No such file") != std::string::npos ||
         dl_error.find("cannot open shared object file") != std::string::npos;
}

}  // namespace taehv::sizing::detail
