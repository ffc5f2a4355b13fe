// safetensors read and write (F32, F16, BF16), the format of the official TAEHV checkpoints.
// Malformed files are reported as SafetensorsError naming the file and, where known, the tensor.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "taehv/files/input_file.h"
#include "taehv/model/safetensors_format.h"

namespace taehv {

class TAEHVImpl;

/// A safetensors file opened (its type checked first: taehv/files/input_file.h) and its header validated, for
/// reading parts of its tensors (a checkpoint's optimizer shards).
struct SafetensorsFile {
  std::string path;
  files::OpenedFile file;
  SafetensorsHeader header;
  /// Reads `size` bytes at byte `offset` of `entry`'s data into `out`. Throws SafetensorsError naming the file and
  /// the tensor (a range outside the tensor, a short read).
  void read(const SafetensorsEntry& entry, uint64_t offset, uint64_t size, void* out) const;
};
/// Opens `path` and parses its header. Throws SafetensorsError.
SafetensorsFile openSafetensors(const std::string& path, files::Role role = files::Role::kOther);

/// Reads every tensor of `path` (in its stored dtype, on the CPU); its type is checked before it is opened
/// (taehv/files/input_file.h). Throws SafetensorsError. `role`: kInput makes it one of this command's inputs, which
/// no output of the command may replace (the commands name theirs before any work: requireInputFiles).
std::map<std::string, torch::Tensor> readSafetensors(const std::string& path,
                                                     files::Role role = files::Role::kOther);

/// Writes `tensors` (contiguous CPU copies, each converted to `dtype`: kFloat, kHalf or kBFloat16) to `path`
/// atomically (temporary file, fsync, rename). Throws SafetensorsError.
void writeSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      torch::Dtype dtype = torch::kFloat);

/// Loads official TAEHV weights into `model` (each tensor upcast to the model's dtype). A TGrow weight with
/// more output rows than the model's (time-upscale stage switched off) keeps the last rows. Missing, extra or
/// wrongly shaped tensors throw SafetensorsError naming them.
void loadWeights(TAEHVImpl& model, const std::string& path);

/// Writes the model's parameters under their upstream names, loadable by the upstream Python TAEHV.
void saveWeights(const TAEHVImpl& model, const std::string& path, torch::Dtype dtype = torch::kHalf);

}  // namespace taehv
