#include "evaluation.h"

#include <chrono>
#include <filesystem>

#include "run_setup.h"
#include "train_state.h"
#include "taehv/log.h"
#include "taehv/model/metrics.h"
#include "taehv/model/safetensors.h"
#include "taehv/train/checkpoint.h"
#include "taehv/train/trainer.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

/// Sums over the evaluation clips k = first, first + step, ... of PSNR, SSIM and edge share of decode(encode(x))
/// against the aligned input frames; `preview` (when not null) receives the preview of clip 0 if this call
/// evaluates it. Unreadable clips are skipped with a warning. The model is put in eval mode and back.
struct EvalSums {
  double psnr = 0, ssim = 0, edges = 0;
  int64_t clips = 0;
};
EvalSums evaluateClips(TAEHV& model, const EvalClips& clips, const torch::Device& device, int64_t first, int64_t step,
                       RgbImage* preview) {
  EvalSums sums;
  torch::NoGradGuard no_grad;
  model->eval();
  for (int64_t k = first; k < clips.size(); k += step) {
    Clip clip;
    try {
      clip = clips.load(k);
    } catch (const DataError& e) {
      log::warn(std::string("skipping unreadable eval item: ") + e.what());
      continue;
    }
    auto x = clip.frames.unsqueeze(0).to(device);
    auto y = model->decodeVideo(model->encodeVideo(x)).to(torch::kFloat);
    auto target = x.narrow(1, 0, y.size(1));
    sums.psnr += psnr(y, target);
    sums.ssim += ssim(y[0].to(torch::kCPU), target[0].to(torch::kCPU));
    sums.edges += edgeShare(y[0], target[0]);
    ++sums.clips;
    if (preview && k == 0) *preview = previewImage(target, y);
  }
  model->train();
  return sums;
}

}  // namespace

RgbImage previewImage(const torch::Tensor& target, const torch::Tensor& pred) {
  const int64_t n = std::min<int64_t>(6, pred.size(1));
  auto top = torch::cat(target[0].narrow(0, 0, n).unbind(0), 2);  // [3, S, n*S]
  auto bottom = torch::cat(pred[0].narrow(0, 0, n).unbind(0), 2);
  auto img = torch::cat({top, bottom}, 1).detach().to(torch::kCPU, torch::kFloat).clamp(0, 1);
  img = img.mul(255).round().to(torch::kUInt8).permute({1, 2, 0}).contiguous();
  RgbImage out;
  out.height = static_cast<int>(img.size(0));
  out.width = static_cast<int>(img.size(1));
  out.pixels.assign(img.data_ptr<uint8_t>(), img.data_ptr<uint8_t>() + img.numel());
  return out;
}

EmaWeights::EmaWeights(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& ema)
    : params_(params) {
  if (ema.empty()) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ema.size(); ++i) {
    backup_.push_back(params_[i].detach().clone());
    params_[i].copy_(ema[i]);
  }
}

EmaWeights::~EmaWeights() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < backup_.size(); ++i) params_[i].copy_(backup_[i]);
}

EvalSummary evaluateAcrossRanks(TAEHV& model, const std::vector<torch::Tensor>& params,
                                const std::vector<torch::Tensor>& ema, const EvalClips& clips,
                                const torch::Device& device, Distributed& dist, int rank, int world,
                                bool want_preview) {
  const auto start = std::chrono::steady_clock::now();
  EvalSummary out;
  EvalSums sums;
  {
    EmaWeights swap(params, ema);
    sums = evaluateClips(model, clips, device, rank, world, want_preview ? &out.preview : nullptr);
  }
  auto totals = torch::tensor({sums.psnr, sums.ssim, sums.edges, static_cast<double>(sums.clips)}, torch::kDouble);
  dist.allreduceSum(totals);
  out.clips = static_cast<int64_t>(totals[3].item<double>());
  if (out.clips > 0) {
    out.psnr = totals[0].item<double>() / static_cast<double>(out.clips);
    out.ssim = totals[1].item<double>() / static_cast<double>(out.clips);
    out.edges = totals[2].item<double>() / static_cast<double>(out.clips);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

EvalResult runEval(const EvalOptions& options) {
  const Config& cfg = options.config;
  cfg.validate();
  DistEnv env;
  setThreads(cfg, env);
  const torch::Device device = pickDevice(cfg, env);
  TAEHV model(TAEHVOptions::forVariant(cfg.model.variant));
  std::string path = options.checkpoint;
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    loadWeights(*model, path);
  } else {
    auto found = resolveResume(
        path, cfg.output.dir, [](const std::string& w) { log::warn(w); }, "--checkpoint");
    if (!found) throw std::runtime_error("no checkpoint in " + cfg.output.dir + "; pass --checkpoint PATH");
    requireSavedSettings(*found, cfg, {"model.variant"});
    const bool use_ema = options.ema && fs::exists(fs::path(*found) / "ema.pt");
    loadTensors((fs::path(*found) / (use_ema ? "ema.pt" : "model.pt")).string(), model, model->parameters(),
                torch::kCPU);
    for (const auto& item : model->named_parameters()) {
      if (!torch::isfinite(item.value()).all().item<bool>()) {
        throw std::runtime_error("checkpoint " + *found + ": tensor '" + item.key() + "' holds NaN or infinite "
                                 "values (a diverged run?): evaluate an earlier checkpoint");
      }
    }
    log::info(std::string(use_ema ? "EMA" : "model") + " weights of " + *found);
  }
  model->to(device);
  const EvalClips clips(cfg, static_cast<uint64_t>(cfg.train.seed));
  const EvalSums sums = evaluateClips(model, clips, device, 0, 1, nullptr);
  EvalResult result;
  result.psnr = sums.psnr;
  result.ssim = sums.ssim;
  result.edges = sums.edges;
  result.clips = sums.clips;
  result.held_out = clips.heldOut();
  if (result.clips == 0) throw DataError("no readable clip to evaluate in " + cfg.data.source);
  result.psnr /= static_cast<double>(result.clips);
  result.ssim /= static_cast<double>(result.clips);
  result.edges /= static_cast<double>(result.clips);
  return result;
}

}  // namespace taehv::train
