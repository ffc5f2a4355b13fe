#include "taehv/model/commands.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

#include "command_line.h"
#include "taehv/files/input_file.h"
#include "taehv/files/output_file.h"
#include "taehv/log.h"
#include "taehv/model/safetensors.h"
#include "taehv/model/streaming.h"
#include "taehv/model/taehv.h"

namespace taehv {
namespace cli {

std::vector<bool> parseSwitches(const std::string& option, const std::string& text) {
  std::vector<bool> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == "1" || item == "true" || item == "on" || item == "True") {
      out.push_back(true);
    } else if (item == "0" || item == "false" || item == "off" || item == "False") {
      out.push_back(false);
    } else {
      throw UsageError("--" + option + " takes comma-separated switches (1/0, true/false, on/off), got '" + text + "'");
    }
  }
  return out;
}

// --variant, or when it is not given the variant the weights file is named after (taew2_2_super.safetensors, ...).
std::string variantName(const Args& args) {
  if (args.has("variant")) {
    return args.required("variant");
  }
  const std::string weights = args.required("weights");
  const std::string named = variantForCheckpoint(weights);
  if (named.empty()) {
    throw UsageError("missing --variant: the weights file name '" + weights +
                     "' does not start with a variant's name (" + variantList() + ")");
  }
  return named;
}

std::string switchesText(const std::array<bool, 3>& on) {
  return std::string(on[0] ? "1" : "0") + "," + (on[1] ? "1" : "0") + "," + (on[2] ? "1" : "0");
}

TAEHVOptions modelOptions(const Args& args) {
  TAEHVOptions o;
  const std::string name = variantName(args);
  try {
    o = TAEHVOptions::forVariant(name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--variant: ") + e.what());
  }
  if (args.has("decoder-time-upscale")) {
    const std::string text = args.get("decoder-time-upscale", "");
    const auto s = parseSwitches("decoder-time-upscale", text);
    const std::array<bool, 3> variant = o.decoder_time_upscale;
    if (s.size() == 2) {
      o.decoder_time_upscale = {false, s[0], s[1]};  // upstream's (a, b) means stages 1 and 2
    } else if (s.size() == 3) {
      o.decoder_time_upscale = {s[0], s[1], s[2]};
    } else {
      throw UsageError("--decoder-time-upscale takes 2 switches a,b (stages 1 and 2) or 3, e.g. 1,1 or 0,0");
    }
    // A stage's weights hold its upscaled frames (TGrow): a switch turns off a stage the variant has, never adds one.
    for (std::size_t stage = 0; stage < 3; ++stage) {
      if (o.decoder_time_upscale[stage] && !variant[stage]) {
        throw UsageError("--decoder-time-upscale " + text + ": stage " + std::to_string(stage) + " of " + name +
                         "'s decoder does not upscale time, and its weights hold no frames to add there; the "
                         "switches can only turn off stages the variant upscales (" + name + ": " +
                         switchesText(variant) + ")");
      }
    }
  }
  if (args.has("decoder-space-upscale")) {
    const std::string text = args.get("decoder-space-upscale", "");
    const auto s = parseSwitches("decoder-space-upscale", text);
    if (s.size() != 3) {
      throw UsageError("--decoder-space-upscale takes 3 switches a,b,c, e.g. 1,1,1");
    }
    const std::array<bool, 3> variant = o.decoder_space_upscale;
    o.decoder_space_upscale = {s[0], s[1], s[2]};
    // The super decoder upscales through a convolution with 4x the channels (PixelShuffle): its weights fix the
    // switches.
    if (o.decoder_arch == DecoderArch::kSuper && o.decoder_space_upscale != variant) {
      throw UsageError("--decoder-space-upscale " + text + ": " + name + "'s super decoder upscales space with " +
                       "convolutions whose weights are made for " + switchesText(variant) +
                       ", so the switches cannot change; leave the option out");
    }
  }
  return o;
}

void requireInputFiles(const Args& args) {
  for (const char* option : {"weights", "input"}) {
    const std::string path = args.get(option, "");
    std::error_code ec;
    // Absent or missing: named where it is read, after the options are checked.
    if (path.empty() || !std::filesystem::exists(path, ec)) continue;
    const std::string what = std::string("--") + option;
    if (Status regular = files::checkInputFile(path, what, files::Role::kInput); !regular.ok()) {
      throw UsageError(regular.error);
    }
  }
}

void requireOutputFile(const std::string& path) {
  if (Status writable = files::checkOutputFile(path); !writable.ok()) throw UsageError("--output: " + writable.error);
}

void applyThreads(const Args& args) {
  if (args.has("threads")) {
    at::set_num_threads(static_cast<int>(args.integer("threads", 1, 1, 1024)));
  }
}

std::string shapeText(c10::IntArrayRef shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

// Reads tensor `name` from `path` as a float32 NTCHW video with `channels` channels, or explains what is wrong.
torch::Tensor readVideo(const std::string& path, const std::string& name, int64_t channels, const std::string& what) {
  std::map<std::string, torch::Tensor> tensors;
  try {
    tensors = readSafetensors(path);
  } catch (const SafetensorsError& e) {
    throw UsageError(std::string("--input: ") + e.what());
  }
  const auto it = tensors.find(name);
  if (it == tensors.end()) {
    std::string names;
    for (const auto& [n, t] : tensors) {
      names += (names.empty() ? "" : ", ") + n;
    }
    throw UsageError("--input '" + path + "' has no tensor '" + name + "' (it has: " +
                     (names.empty() ? "none" : names) + "); " + what);
  }
  const torch::Tensor& t = it->second;
  if (t.dim() == 5 && t.size(0) == 0) {  // nothing to code: libtorch's reductions and the decoder fail on it
    throw UsageError("--input '" + path + "', tensor '" + name + "' holds 0 clips (shape " + shapeText(t.sizes()) +
                     "); give at least one: " + what);
  }
  if (t.dim() != 5 || t.size(2) != channels || t.size(1) < 1 || t.size(3) < 1 || t.size(4) < 1) {
    throw UsageError("--input '" + path + "', tensor '" + name + "': shape " + shapeText(t.sizes()) + ", expected " +
                     what);
  }
  torch::Tensor x = t.to(torch::kFloat);
  if (!torch::isfinite(x).all().item<bool>()) {
    throw UsageError("--input '" + path + "', tensor '" + name + "' contains NaN or infinite values");
  }
  return x;
}

// A result with NaN or Inf is not written: exit 1 rather than a file of NaN that looks like a success.
// Checked in 1M-element chunks: torch::isfinite on the whole output would allocate temporaries larger than the
// output itself (abs() and two bool masks), which the streaming decode's memory bound does not allow.
void requireFinite(const torch::Tensor& result, const std::string& what) {
  constexpr int64_t kChunk = 1 << 20;
  const torch::Tensor flat = result.reshape({-1});
  bool finite = true;
  for (int64_t begin = 0; finite && begin < flat.numel(); begin += kChunk) {
    finite = torch::isfinite(flat.slice(0, begin, std::min(begin + kChunk, flat.numel()))).all().item<bool>();
  }
  if (!finite) {
    throw std::runtime_error("the " + what + " contain NaN or infinite values (the weights or the input overflow in "
                             "this dtype?); nothing was written");
  }
}

int runGuarded(const std::string& usage, const std::vector<std::string>& argv, const std::function<int()>& body) {
  return runCommand(usage, argv, [&] {
    try {
      return body();
    } catch (const UsageError&) {
      throw;  // runCommand's: the message, then the usage
    } catch (const SafetensorsError& e) {
      log::error(e.what());
      return 2;
    } catch (const c10::Error& e) {
      log::error(e.what_without_backtrace());
      return 1;
    } catch (const std::exception& e) {
      log::error(e.what());
      return 1;
    }
  });
}

const std::string kEncodeUsage =
    std::string("usage: taehv-train encode [--variant V] --weights W.safetensors --input IN.safetensors\n"
                "                          --output OUT.safetensors [--streaming] [--threads K]\n"
                "  reads tensor 'input' (N, T, 3, H, W) in [0, 1], writes tensor 'latents' (float32).\n"
                "  --input IN.mp4 (any name not ending in .safetensors): every frame of a video file FFmpeg reads,\n"
                "  padded (edge pixels repeated, right and bottom) to multiples of 8 x the patch size.\n") +
    kVariantsHelp;

const std::string kDecodeUsage =
    std::string("usage: taehv-train decode [--variant V] --weights W.safetensors --input IN.safetensors\n"
                "                          --output OUT.safetensors [--streaming] [--decoder-time-upscale a,b]\n"
                "                          [--decoder-space-upscale a,b,c] [--threads K] [--fps R]\n"
                "  reads tensor 'latents' (N, L, C, h, w), writes tensor 'frames' (float32, in [0, 1]);\n"
                "  --output OUT.mp4 (any name not ending in .safetensors, N = 1): an H.264 video at R frames/s\n"
                "  (default 24; libx264, CRF 18).\n") +
    kVariantsHelp;


TAEHV loadModel(const Args& args, bool streaming) {
  TAEHV model(modelOptions(args));
  if (streaming && model->options().time_layout == TimeLayout::kH3) {
    throw UsageError("--streaming: taeh3 has no streaming mode (H3 encodes whole 17-frame chunks; upstream has none "
                     "either); leave --streaming out");
  }
  const std::string weights = args.required("weights");
  try {
    loadWeights(*model, weights);
  } catch (const SafetensorsError& e) {
    throw UsageError(std::string("--weights: ") + e.what());
  }
  model->eval();
  // Parallel mode on NHWC activations (streaming always is): no reorders around each convolution. Measured (roundtrip,
  // taehv, 256x256, 17 frames, 2 threads): 4.6-5.0 -> 3.9-4.0 CPU s per run, 25% fewer page faults. Training keeps
  // NCHW, where it measured no faster (bench/model/RESULTS.md).
  model->setChannelsLast(true);
  return model;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::pair<torch::Tensor, double> timedInference(const std::string& what, const std::function<torch::Tensor()>& run) {
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor result;
  {
    torch::InferenceMode guard;
    result = run();
  }
  const double seconds = secondsSince(start);
  requireFinite(result, what);
  return {result, seconds};
}

// This process's peak resident memory in MB: VmHWM of /proc/self/status, which (unlike getrusage's ru_maxrss)
// starts afresh at exec and so does not include the RSS of the process that forked this one; ru_maxrss elsewhere.
double peakRssMb() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status != nullptr) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, status) != nullptr) {
      if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) {
        break;
      }
    }
    std::fclose(status);
    if (kb >= 0) {
      return static_cast<double>(kb) / 1024.0;
    }
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// Copies each output of a stream into its place in one preallocated tensor, so that the outputs are held once.
class OutputVideo {
 public:
  OutputVideo(int64_t steps, const StreamProgress& progress) : steps_(steps), progress_(progress) {}
  void add(const torch::Tensor& step) {  // step: (N, 1, C, H, W)
    if (!video_.defined()) {
      video_ = torch::empty({step.size(0), steps_, step.size(2), step.size(3), step.size(4)}, step.options());
    }
    TORCH_CHECK(next_ < steps_, "stream made more than the ", steps_, " outputs expected");
    video_.select(1, next_++).copy_(step.select(1, 0));
    if (progress_) progress_(next_, steps_);
  }
  torch::Tensor finish() {
    TORCH_CHECK(next_ == steps_, "stream made ", next_, " outputs, ", steps_, " expected");
    return video_;
  }

 private:
  int64_t steps_;
  int64_t next_ = 0;
  const StreamProgress& progress_;
  torch::Tensor video_;
};

torch::Tensor encodeStreaming(const TAEHV& model, const TensorSource& next, int64_t expected,
                              const StreamProgress& progress) {
  StreamingTAEHV stream(model);
  std::vector<torch::Tensor> latents;  // each (N, 1, C, h, w): a few percent of the frames they encode
  const auto add = [&](torch::Tensor z) {
    latents.push_back(std::move(z));
    if (progress) progress(static_cast<int64_t>(latents.size()), expected);
  };
  while (std::optional<torch::Tensor> frame = next()) {
    if (auto z = stream.encode(*frame)) add(std::move(*z));
  }
  for (auto& z : stream.flushEncoder()) add(std::move(z));
  TORCH_CHECK(!latents.empty(), "encodeStreaming: no frames");
  return torch::cat(latents, 1);
}

torch::Tensor encodeStreaming(const TAEHV& model, const torch::Tensor& frames, const StreamProgress& progress) {
  int64_t t = 0;
  return encodeStreaming(
      model,
      [&]() -> std::optional<torch::Tensor> {
        if (t == frames.size(1)) return std::nullopt;
        ++t;
        return frames.slice(1, t - 1, t);
      },
      model->encodedLatents(frames.size(1)), progress);
}

StreamDecoder::StreamDecoder(const TAEHV& model, torch::Tensor latents)
    : stream_(model), latents_(std::move(latents)) {}

int64_t StreamDecoder::frames() const {
  const TAEHV& model = stream_.model();
  const bool trims = model->options().time_layout != TimeLayout::kCogVideoX;  // upstream streaming: taecvx never
  return latents_.size(1) * model->timeUpscale() - (trims ? model->framesToTrim() : 0);
}

std::optional<torch::Tensor> StreamDecoder::next() {
  // One latent queued at a time, its frames drained one by one before the next goes in.
  if (std::optional<torch::Tensor> x = stream_.decode()) return x;
  while (next_latent_ < latents_.size(1)) {
    const int64_t t = next_latent_++;
    if (std::optional<torch::Tensor> x = stream_.decode(latents_.slice(1, t, t + 1))) return x;
  }
  return std::nullopt;
}

torch::Tensor decodeStreaming(const TAEHV& model, const torch::Tensor& latents, const StreamProgress& progress) {
  StreamDecoder decoder(model, latents);
  OutputVideo out(decoder.frames(), progress);
  while (std::optional<torch::Tensor> x = decoder.next()) out.add(*x);
  return out.finish();
}

}  // namespace cli

using namespace cli;  // NOLINT: this file defines them

int encodeCommand(const std::vector<std::string>& argv) {
  return runGuarded(kEncodeUsage, argv, [&] {
    const Args args = codecOptions().parse(argv);
    applyThreads(args);
    const std::string output = args.required("output");
    requireInputFiles(args);
    requireOutputFile(output);
    const bool streaming = args.flag("streaming");
    TAEHV model = loadModel(args, streaming);
    const std::string input = args.required("input");
    if (streaming && !isSafetensorsPath(input)) return encodeVideoFileStreaming(model, input, output);
    const int64_t p = model->options().patch_size;
    torch::Tensor frames = isSafetensorsPath(input) ? readVideo(input, "input", 3, "(N, T, 3, H, W) frames in [0, 1]")
                                                    : readVideoInput(input, model).frames;
    if (frames.size(3) % p != 0 || frames.size(4) % p != 0) {
      throw UsageError("--input: frame size " + std::to_string(frames.size(3)) + "x" + std::to_string(frames.size(4)) +
                       " must be a multiple of the variant's patch size " + std::to_string(p));
    }
    const double lo = frames.min().item<double>();
    const double hi = frames.max().item<double>();
    if (lo < 0 || hi > 1) {
      throw UsageError("--input: values must be in [0, 1], found [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "] (frames in [-1, 1]? rescale them with (x + 1) / 2)");
    }
    const auto [latents, seconds] = timedInference("latents", [&] {
      return streaming ? encodeStreaming(model, frames) : model->encodeVideo(frames);
    });
    writeSafetensors(output, {{"latents", latents}}, torch::kFloat);
    log::report(log::format("encoded %s -> latents %s in %.3f s (%s) peak_rss_mb=%.1f",
                            shapeText(frames.sizes()).c_str(), shapeText(latents.sizes()).c_str(), seconds,
                            streaming ? "streaming" : "parallel", peakRssMb()));
    return 0;
  });
}

int decodeCommand(const std::vector<std::string>& argv) {
  return runGuarded(kDecodeUsage, argv, [&] {
    const Args args = codecOptions().value("fps").parse(argv);
    applyThreads(args);
    const std::string output = args.required("output");
    const bool to_video = !isSafetensorsPath(output);
    const int fps = static_cast<int>(args.integer("fps", 24, 1, 1000));
    if (args.has("fps") && !to_video) throw UsageError("--fps is for a video --output, not .safetensors");
    requireInputFiles(args);
    if (to_video) {
      requireVideoOutput(output);
    } else {
      requireOutputFile(output);
    }
    const bool streaming = args.flag("streaming");
    TAEHV model = loadModel(args, streaming);
    const int64_t c = model->options().latent_channels;
    const std::string input = args.required("input");
    torch::Tensor latents =
        readVideo(input, "latents", c,
                  "(N, L, " + std::to_string(c) + ", h, w) latents for variant " + variantName(args));
    if (to_video && latents.size(0) != 1) {
      throw UsageError("--output " + output + ": a video file holds one clip, --input holds " +
                       std::to_string(latents.size(0)) + " (N = " + std::to_string(latents.size(0)) +
                       "); write .safetensors instead");
    }
    const auto [frames, seconds] = timedInference("frames", [&] {
      return streaming ? decodeStreaming(model, latents) : model->decodeVideo(latents);
    });
    if (to_video) {
      writeVideoOutput(output, frames, fps, 1);
    } else {
      writeSafetensors(output, {{"frames", frames}}, torch::kFloat);
    }
    log::report(log::format("decoded latents %s -> frames %s in %.3f s (%s) peak_rss_mb=%.1f",
                            shapeText(latents.sizes()).c_str(), shapeText(frames.sizes()).c_str(), seconds,
                            streaming ? "streaming" : "parallel", peakRssMb()));
    return 0;
  });
}

}  // namespace taehv
