#include "train_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "taehv/log.h"
#include "taehv/model/output_file.h"
#include "taehv/train/checkpoint.h"

namespace taehv::train {
namespace fs = std::filesystem;

std::string formatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto total = static_cast<int64_t>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return buf;
}

TrainLog::TrainLog(const Config& cfg, bool rank0, int64_t start_step, bool resumed, int64_t frames_per_step)
    : cfg_(cfg),
      rank0_(rank0),
      tty_(isatty(STDOUT_FILENO) == 1),
      start_step_(start_step),
      frames_per_step_(frames_per_step),
      start_(std::chrono::steady_clock::now()) {
  if (!rank0_) return;
  const std::string& out_dir = cfg.output.dir;
  fs::create_directories(out_dir);
  if (cfg.log.tensorboard) tb_ = std::make_unique<TfEventsWriter>((fs::path(out_dir) / "tensorboard").string());
  if (resumed) trimMetrics((fs::path(out_dir) / "metrics.jsonl").string(), start_step);
  metrics_ = openForAppend((fs::path(out_dir) / "metrics.jsonl").string());  // throws OutputFileError
}

void TrainLog::say(const std::string& line) const {
  if (!rank0_) return;
  log::report((tty_ ? "\r\033[K" : "") + line);  // on a terminal, over the progress bar
}

double TrainLog::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void TrainLog::appendMetrics(const std::string& json_line) {
  const std::string row = json_line + "\n";
  if (!writeAllBytes(metrics_.get(), row.data(), row.size())) {
    throw OutputFileError("cannot append to " + cfg_.output.dir + "/metrics.jsonl: " + std::strerror(errno) + " (" +
                          freeSpaceNote(cfg_.output.dir) + ")");
  }
}

void TrainLog::writePreview(const std::string& file, const std::string& tag, int64_t done, const RgbImage& image) {
  const auto png = encodePng(image);
  fs::create_directories(fs::path(cfg_.output.dir) / "previews");
  writeFileBytes((fs::path(cfg_.output.dir) / "previews" / file).string(), png);
  if (tb_) tb_->image(tag, done, png, image.width, image.height);
}

void TrainLog::step(const Step& s, bool force) {
  step_avg_ = s.done == start_step_ + 1 ? s.step_s : 0.9 * step_avg_ + 0.1 * s.step_s;
  wait_sum_ += s.data_wait_s;
  step_sum_ += s.step_s;
  loss_sum_ += s.loss;
  psnr_sum_ += s.psnr;
  optimizer_sum_ += s.optimizer_s;
  update_sum_ += s.update_s;
  ++window_;
  if (!rank0_) return;
  const int64_t steps = cfg_.train.steps;
  if (s.done % cfg_.log.every == 0 || force || s.done == start_step_ + 1) {
    const double n = static_cast<double>(window_);
    const double step_mean = step_sum_ / n;
    const double wait_mean = wait_sum_ / n;
    // Loss and PSNR: means over the steps since the previous log line, over all ranks.
    const double loss = loss_sum_ / n;
    const double psnr = psnr_sum_ / n;
    const double fps = static_cast<double>(frames_per_step_) / step_mean;
    double eta = step_avg_ * static_cast<double>(steps - s.done);
    if (s.time_left_s >= 0) eta = std::min(eta, s.time_left_s);
    char line[512];
    std::snprintf(line, sizeof line,
                  "step %lld/%lld | loss %.5f | PSNR %.2f dB | %.1f frames/s | step %.3f s | data-wait %.3f s | "
                  "lr %.2e | ETA %s",
                  static_cast<long long>(s.done), static_cast<long long>(steps), loss, psnr, fps, step_mean,
                  wait_mean, s.lr, formatDuration(eta).c_str());
    say(line);
    nlohmann::json m;
    m["step"] = s.done;
    m["loss"] = loss;
    m["psnr"] = psnr;
    m["lr"] = s.lr;
    m["frames_per_s"] = fps;
    m["step_s"] = step_mean;
    m["data_wait_s"] = wait_mean;
    m["optimizer_s"] = optimizer_sum_ / n;
    m["update_s"] = update_sum_ / n;
    m["grad_norm"] = s.grad_norm;
    m["data_skipped"] = s.data_skipped;
    m["elapsed_s"] = elapsed();
    if (s.phases != nullptr && s.phases->on()) {
      for (size_t i = 0; i < PhaseTimes::kCount; ++i) {
        m[std::string("phase_") + kPhaseNames[i] + "_s"] = s.phases->wall(i) / n;
        m[std::string("phase_") + kPhaseNames[i] + "_cpu_s"] = s.phases->cpu(i) / n;
      }
      s.phases->clear();
    }
    appendMetrics(m.dump());
    if (tb_) {
      tb_->scalar("train/loss", s.done, loss);
      tb_->scalar("train/psnr_db", s.done, psnr);
      tb_->scalar("train/lr", s.done, s.lr);
      tb_->scalar("train/frames_per_s", s.done, fps);
      tb_->scalar("train/step_s", s.done, step_mean);
      tb_->scalar("train/data_wait_s", s.done, wait_mean);
      tb_->scalar("train/grad_norm", s.done, s.grad_norm);
    }
    wait_sum_ = step_sum_ = loss_sum_ = psnr_sum_ = optimizer_sum_ = update_sum_ = 0;
    window_ = 0;
  } else if (tty_) {
    const int width = 30;
    const int filled = static_cast<int>(width * s.done / steps);
    log::print(log::Stream::kStdout,
               log::format("\r[%s%s] %lld/%lld loss %.5f", std::string(static_cast<size_t>(filled), '#').c_str(),
                           std::string(static_cast<size_t>(width - filled), '.').c_str(),
                           static_cast<long long>(s.done), static_cast<long long>(steps), s.loss));
  }
}

void TrainLog::eval(int64_t done, const EvalSummary& e, bool held_out, bool ema) {
  if (!rank0_) return;
  if (e.clips == 0) {
    say("step " + std::to_string(done) + ": no readable eval clip; evaluation skipped");
    return;
  }
  const std::string what = held_out ? "held-out" : "eval (not held out: file source)";
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld/%lld | %s PSNR %.2f dB | SSIM %.4f | edge share %.3f | %lld clips %lldx%lld | %.1f s",
                static_cast<long long>(done), static_cast<long long>(cfg_.train.steps), what.c_str(), e.psnr, e.ssim,
                e.edges, static_cast<long long>(e.clips),
                static_cast<long long>(cfg_.eval.frames > 0 ? cfg_.eval.frames : cfg_.data.frames),
                static_cast<long long>(cfg_.eval.size > 0 ? cfg_.eval.size : cfg_.data.size), e.seconds);
  say(line);
  nlohmann::json m;
  m["step"] = done;
  m["eval_psnr"] = e.psnr;
  m["eval_ssim"] = e.ssim;
  m["eval_edge_share"] = e.edges;
  m["eval_clips"] = e.clips;
  m["eval_held_out"] = held_out;
  m["eval_ema"] = ema;
  m["eval_s"] = e.seconds;
  m["elapsed_s"] = elapsed();
  appendMetrics(m.dump());
  if (tb_) {
    tb_->scalar("eval/psnr_db", done, e.psnr);
    tb_->scalar("eval/ssim", done, e.ssim);
    tb_->scalar("eval/edge_share", done, e.edges);
  }
  if (e.preview.width > 0 && cfg_.log.preview_every > 0) {
    char name[64];
    std::snprintf(name, sizeof name, "eval-step-%07lld.png", static_cast<long long>(done));
    writePreview(name, "eval/input_top_reconstruction_bottom", done, e.preview);
  }
}

void TrainLog::preview(int64_t done, const RgbImage& image) {
  if (!rank0_) return;
  char name[64];
  std::snprintf(name, sizeof name, "step-%07lld.png", static_cast<long long>(done));
  writePreview(name, "preview/input_top_reconstruction_bottom", done, image);
}

}  // namespace taehv::train
