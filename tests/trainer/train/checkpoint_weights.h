// Reading a checkpoint's weights in tests: the trainer's tests and the elastic node-group test compare the weights
// of two runs the same way.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>

#include "taehv/model/taehv.h"

namespace taehv::testing {

/// Named tensors of a checkpoint's model.pt / ema.pt (the TAEHV model's parameter names).
inline std::map<std::string, torch::Tensor> loadTensors(const std::string& file) {
  TAEHV model;
  torch::serialize::InputArchive archive;
  archive.load_from(file);
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) {
    torch::Tensor t;
    archive.read(item.key(), t);
    out[item.key()] = t;
  }
  return out;
}

/// Euclidean distance between two sets of the same named tensors, in double.
inline double distance(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double sum = 0;
  for (const auto& [k, t] : a) sum += (t.to(torch::kDouble) - b.at(k).to(torch::kDouble)).pow(2).sum().item<double>();
  return std::sqrt(sum);
}

}  // namespace taehv::testing
