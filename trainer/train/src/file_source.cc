// File sources: video files (decoded by taehv::video) and folders of PNG/JPEG frames, cut into clips, with teacher
// latents where each item has them.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "random.h"
#include "taehv/model/safetensors.h"
#include "taehv/train/clip_source.h"
#include "taehv/train/events.h"
#include "taehv/video/video_file.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

bool hasExt(const fs::path& p, std::initializer_list<const char*> exts) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* x : exts) {
    if (e == x) return true;
  }
  return false;
}
bool isImage(const fs::path& p) { return hasExt(p, {".png", ".jpg", ".jpeg"}); }

std::vector<fs::path> imagesIn(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && isImage(e.path())) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

torch::Tensor imageTensor(const fs::path& path) {
  RgbImage img;
  try {
    const auto bytes = readFileBytes(path.string());
    img = hasExt(path, {".png"}) ? decodePng(bytes) : decodeJpeg(bytes);
  } catch (const std::exception& e) {
    throw DataError(path.string() + ": " + e.what());
  }
  return torch::from_blob(img.pixels.data(), {img.height, img.width, 3}, torch::kUInt8).clone();
}

/// [T, H, W, 3] uint8 -> [T, 3, S, S] float: square crop (side, x, y) then resize.
torch::Tensor cropResize(const torch::Tensor& thw3, int64_t side, int64_t x, int64_t y, int64_t size) {
  auto t = thw3.narrow(1, y, side).narrow(2, x, side).permute({0, 3, 1, 2}).to(torch::kFloat).div_(255.0);
  if (side == size) return t.contiguous();
  namespace F = torch::nn::functional;
  auto options = F::InterpolateFuncOptions().size(std::vector<int64_t>{size, size});
  if (side > size) {
    options.mode(torch::kArea);
  } else {
    options.mode(torch::kBilinear).align_corners(false);
  }
  return F::interpolate(t, options).clamp_(0, 1).contiguous();
}

class FileSource : public ClipSource {
 public:
  struct Item {
    fs::path path;
    bool video;
    std::vector<fs::path> frames;  // for frame folders
    fs::path latents;              // empty if none
  };
  explicit FileSource(std::vector<Item> items) : items_(std::move(items)) {
    all_latents_ = !items_.empty() &&
                   std::all_of(items_.begin(), items_.end(), [](const Item& i) { return !i.latents.empty(); });
  }
  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  std::string name(int64_t index) const override { return items_.at(static_cast<size_t>(index)).path.string(); }
  bool hasLatents() const override { return all_latents_; }

  Clip load(int64_t index, const ClipRequest& req) const override {
    const Item& item = items_.at(static_cast<size_t>(index));
    Rng aug(req.seed);
    const bool distill = all_latents_;
    torch::Tensor latents;
    int64_t T = req.frames;
    if (distill) {
      try {
        auto tensors = taehv::readSafetensors(item.latents.string());
        auto it = tensors.find("latents");
        if (it == tensors.end()) throw DataError(item.latents.string() + ": no tensor named 'latents'");
        latents = it->second.to(torch::kFloat);
        if (latents.dim() != 4) throw DataError(item.latents.string() + ": 'latents' must be [L, C, h, w]");
        latents = latents.narrow(0, 0, std::min<int64_t>(latents.size(0), T / 4));
      } catch (const DataError&) {
        throw;
      } catch (const std::exception& e) {
        throw DataError(item.latents.string() + ": " + e.what());
      }
    }
    torch::Tensor thw3;  // [T, H, W, 3] uint8
    int64_t stride = 1, start = 0;
    if (!item.video) {
      const int64_t n = static_cast<int64_t>(item.frames.size());
      if (n == 0) throw DataError(item.path.string() + ": no frames");
      if (!distill) pickWindow(aug, n, T, req.stride_max, &stride, &start);
      std::vector<torch::Tensor> frames;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t k = std::min(n - 1, start + t * stride);
        frames.push_back(imageTensor(item.frames[static_cast<size_t>(k)]));
        if (frames.back().sizes() != frames.front().sizes()) {
          throw DataError(item.frames[static_cast<size_t>(k)].string() + ": frame size differs from the first");
        }
      }
      thw3 = torch::stack(frames);
    } else {
      thw3 = videoClip(item.path.string(), aug, T, req.stride_max, distill);
    }
    const int64_t H = thw3.size(1), W = thw3.size(2);
    const int64_t short_side = std::min(H, W);
    int64_t side = short_side, x = (W - short_side) / 2, y = (H - short_side) / 2;
    if (!distill) {
      side = std::max<int64_t>(1, static_cast<int64_t>(std::lround(short_side * aug.uniform(req.crop_min, 1.0))));
      x = aug.integer(0, W - side);
      y = aug.integer(0, H - side);
    }
    return Clip{cropResize(thw3, side, x, y, req.size), latents};
  }

 private:
  /// [T, H, W, 3] uint8: T frames of a video at a stride and start drawn from `aug` over its estimated length (the
  /// first T at stride 1 for distillation); a video that ends early repeats its last frame. Decoded by taehv::video
  /// (kFast RGB; damage after the first frame keeps the frames before it). Throws DataError.
  static torch::Tensor videoClip(const std::string& path, Rng& aug, int64_t T, int64_t stride_max, bool distill) {
    try {
      video::VideoReader reader(path);
      int64_t stride = 1, start = 0;
      if (!distill) pickWindow(aug, std::max<int64_t>(reader.frameCountEstimate(), 1), T, stride_max, &stride, &start);
      std::vector<torch::Tensor> frames =
          reader.read({start, stride, T}, video::RgbConversion::kFast, video::OnDamage::kKeepDecoded);
      while (static_cast<int64_t>(frames.size()) < T) frames.push_back(frames.back());
      return torch::stack(frames);
    } catch (const video::VideoError& e) {
      throw DataError(e.what());
    }
  }

  static void pickWindow(Rng& aug, int64_t n, int64_t T, int64_t stride_max, int64_t* stride, int64_t* start) {
    const int64_t fit = T > 1 ? std::max<int64_t>(1, (n - 1) / (T - 1)) : 1;
    *stride = aug.integer(1, std::max<int64_t>(1, std::min(stride_max, fit)));
    const int64_t span = (T - 1) * *stride + 1;
    *start = n > span ? aug.integer(0, n - span) : 0;
  }

  std::vector<Item> items_;
  bool all_latents_ = false;
};

fs::path latentsFor(const fs::path& item) {
  fs::path p = item;
  p += ".latents.safetensors";
  return fs::exists(p) ? p : fs::path();
}

}  // namespace

std::unique_ptr<ClipSource> makeFileSource(const std::string& path_text) {
  const fs::path path(path_text);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw DataError("data.source '" + path_text + "' does not exist; give 'synthetic', a video file or a folder");
  }
  std::vector<FileSource::Item> items;
  auto frameFolder = [&](const fs::path& dir) {
    auto frames = imagesIn(dir);
    if (!frames.empty()) items.push_back({dir, false, std::move(frames), latentsFor(dir)});
  };
  if (fs::is_regular_file(path, ec)) {
    items.push_back({path, true, {}, latentsFor(path)});
  } else {
    frameFolder(path);
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(path, ec)) entries.push_back(e.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
      if (fs::is_directory(e, ec)) {
        frameFolder(e);
      } else if (video::isVideoFileName(e.string())) {
        items.push_back({e, true, {}, latentsFor(e)});
      }
    }
  }
  if (items.empty()) {
    throw DataError("data.source '" + path_text + "' holds no video files (" + video::videoFileExtensionList() +
                    ") and no folders of .png/.jpg frames");
  }
  return std::make_unique<FileSource>(std::move(items));
}

}  // namespace taehv::train
