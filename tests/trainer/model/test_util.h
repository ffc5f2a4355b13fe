// Helpers shared by the model tests: where the reference vectors are, temporary folders, thread count.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace taehv::testing {

/// ../shared/taehv-reference, from TAEHV_SHARED_DIR (set by ctest). Fails the test when it is not there: the
/// reference vectors are required inputs, not optional ones.
inline std::string referenceDir() {
  const char* shared = std::getenv("TAEHV_SHARED_DIR");
  const std::string dir = std::string(shared ? shared : "../shared") + "/taehv-reference";
  if (!std::filesystem::exists(dir + "/manifest.public.json")) {
    ADD_FAILURE() << "reference vectors not found in " << dir << " (set TAEHV_SHARED_DIR)";
  }
  return dir;
}

/// A fresh folder under $TMPDIR, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "taehv-model-test.XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// One intra-op thread: ctest runs these tests two at a time on 2 shared cores, and OpenMP threads spinning on an
/// oversubscribed machine slow everything down by large factors.
inline void useTestThreads() { at::set_num_threads(1); }

inline double maxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace taehv::testing
