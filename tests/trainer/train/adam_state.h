// The AdamW moments a checkpoint holds, in either format (full optimizer.pt, or ZeRO 1-2's shards read here on their
// own), and the comparison of two runs' weights and moments, for the ZeRO tests.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "taehv/model/safetensors.h"
#include "taehv/model/taehv.h"
#include "train_runs.h"

namespace taehv::testing {

// ZeRO (train.zero_stage, zero.h): AdamW with the recipe's clipping, so the sharded update, the sharded gradient
// norm and the reduce-scatter all take part. Stage 1 and 2 must reach stage 0's weights and AdamW moments.
inline const std::vector<std::string> kAdam = {"train.warmup_steps=2", "checkpoint.every=1", "checkpoint.keep=5",
                                        "dist.bucket_mb=4"};

struct AdamState {
  std::map<std::string, torch::Tensor> exp_avg, exp_avg_sq;
  int64_t step = 0;
};

/// The AdamW moments of checkpoint folder `dir`: its optimizer.pt (torch::optim::AdamW's format), or at ZeRO 1-2
/// its shard files, read here on their own (safetensors + optimizer_layout.json), not through the trainer's loader.
inline AdamState loadAdamState(const std::string& dir) {
  TAEHV model;
  AdamState out;
  namespace fs = std::filesystem;
  if (!fs::exists(dir + "/optimizer.pt")) {
    const auto layout = nlohmann::json::parse(slurp(dir + "/optimizer_layout.json"));
    std::vector<torch::Tensor> m, v;
    for (const auto& shard : layout.at("shards")) {
      auto tensors = readSafetensors(dir + "/" + shard.at("file").get<std::string>());
      m.push_back(tensors.at("exp_avg"));
      v.push_back(tensors.at("exp_avg_sq"));
    }
    const auto flat_m = torch::cat(m), flat_v = torch::cat(v);
    std::map<std::string, c10::IntArrayRef> shapes;
    for (const auto& item : model->named_parameters()) shapes.emplace(item.key(), item.value().sizes());
    for (const auto& p : layout.at("params")) {
      const auto name = p.at("name").get<std::string>();
      const int64_t at = p.at("offset").get<int64_t>(), n = p.at("numel").get<int64_t>();
      out.exp_avg[name] = flat_m.narrow(0, at, n).view(shapes.at(name)).clone();
      out.exp_avg_sq[name] = flat_v.narrow(0, at, n).view(shapes.at(name)).clone();
    }
    out.step = layout.at("step").get<int64_t>();
    return out;
  }
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  torch::serialize::InputArchive archive;
  archive.load_from(dir + "/optimizer.pt");
  optimizer.load(archive);
  for (const auto& item : model->named_parameters()) {
    const auto found = optimizer.state().find(item.value().unsafeGetTensorImpl());
    if (found == optimizer.state().end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*found->second);
    out.exp_avg[item.key()] = s.exp_avg();
    out.exp_avg_sq[item.key()] = s.exp_avg_sq();
    out.step = s.step();
  }
  return out;
}

inline double norm(const std::map<std::string, torch::Tensor>& a) {
  double sum = 0;
  for (const auto& [k, t] : a) sum += t.to(torch::kDouble).pow(2).sum().item<double>();
  return std::sqrt(sum);
}

inline double maxAbsDifference(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double out = 0;
  for (const auto& [k, t] : a) out = std::max(out, (t - b.at(k)).abs().max().item<double>());
  return out;
}

/// Weights and both AdamW moments of run b against run a at `steps`: relative errors must stay below `tolerance`.
inline void expectSameTraining(const std::string& a, const std::string& b, int64_t steps, double tolerance,
                        const std::string& what) {
  EXPECT_LT(relativeError(a, b, steps), tolerance) << what << ": weights";
  const std::string folder = "/checkpoint-" + std::to_string(steps);
  const auto sa = loadAdamState(a + folder), sb = loadAdamState(b + folder);
  ASSERT_EQ(sa.exp_avg.size(), TAEHV()->parameters().size()) << what << ": " << a << " saved no full AdamW state";
  ASSERT_EQ(sb.exp_avg.size(), sa.exp_avg.size()) << what << ": " << b << " saved no full AdamW state";
  EXPECT_EQ(sb.step, sa.step) << what;
  const double m = distance(sa.exp_avg, sb.exp_avg) / norm(sa.exp_avg);
  const double v = distance(sa.exp_avg_sq, sb.exp_avg_sq) / norm(sa.exp_avg_sq);
  std::printf("  %s: AdamW moments relative error m %.3g, v %.3g\n", what.c_str(), m, v);
  EXPECT_LT(m, tolerance) << what << ": exp_avg";
  EXPECT_LT(v, tolerance) << what << ": exp_avg_sq";
}

}  // namespace taehv::testing
