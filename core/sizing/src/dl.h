// Internal: dlopen/dlsym helpers for the optional NVIDIA libraries (NVML, CUDA driver, NCCL).
#pragma once

#include <dlfcn.h>

#include <string>

#include "taehv/elf_check.h"
#include "taehv/loadable.h"

namespace taehv::sizing::detail {

/// A dlopen'ed library. Never closed: the CUDA driver and NCCL start threads that must not lose their code,
/// and a handle costs nothing once the process has it.
class DynamicLibrary {
 public:
  /// Loads `name`: a soname is looked up by the dynamic loader in the system's folders; a path (a user's
  /// TAEHV_NVML_LIBRARY, ...; `what` names it, e.g. "NVML library") first passes the checks that guard plugins
  /// (loadable.h, elf_check.h): a FIFO would block dlopen for ever, a file cut short kill the process with SIGBUS, and
  /// a file others can change run their code. A refused file is not opened: refused() and error() say why. A path
  /// that does not exist is left to dlopen, whose error says "No such file" (isNotFound).
  DynamicLibrary(const std::string& name, const std::string& what) {
    if (name.find('/') != std::string::npos) {
      bool missing = false;
      Status file = checkLoadableFile(name, what, &missing);
      if (file.ok()) {
        if (Status elf = checkElfSharedObject(name); !elf.ok()) {
          file.error = name + ": " + what + " is not a shared library taehv-run can load (" + elf.error + ")";
        }
      }
      if (!file.ok() && !missing) {
        refused_ = true;
        error_ = file.error;
        return;
      }
    }
    handle_ = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = ::dlerror();
      error_ = why != nullptr ? why : "dlopen failed";
    }
  }
  bool loaded() const { return handle_ != nullptr; }
  /// The file was refused before dlopen (error() is one line starting with its path).
  bool refused() const { return refused_; }
  const std::string& error() const { return error_; }

  /// The symbol as a function pointer of type F, or nullptr.
  template <typename F>
  F symbol(const char* name) const {
    if (handle_ == nullptr) return nullptr;
    return reinterpret_cast<F>(::dlsym(handle_, name));
  }

 private:
  void* handle_ = nullptr;
  bool refused_ = false;
  std::string error_;
};

/// True when dlerror() text means "file not there" (as opposed to "there but broken").
inline bool isNotFound(const std::string& dl_error) {
  return dl_error.find("No such file") != std::string::npos ||
         dl_error.find("cannot open shared object file") != std::string::npos;
}

}  // namespace taehv::sizing::detail
