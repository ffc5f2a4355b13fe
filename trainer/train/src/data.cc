#include "taehv/train/data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "taehv/model/safetensors.h"
#include "taehv/train/events.h"
#include "taehv/video/video_file.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Small deterministic generator (independent of the standard library's distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(splitmix(seed)) {}
  uint64_t next() { return state_ = splitmix(state_); }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

// --------------------------------------------------------------------------------------------------------
// Synthetic source.
struct Shape {
  int kind;  // 0 disc, 1 box, 2 ring, 3 striped disc
  double r, g, b;
  double r2, g2, b2;
  double radius;
  double x0, y0, vx, vy;
  double angle0, spin;
  double stripe_freq;
};

struct Scene {
  int background;  // 0 gradient, 1 stripes, 2 checker, 3 sinusoid blobs
  double c0[3], c1[3];
  double freq, angle, drift_x, drift_y;
  std::vector<Shape> shapes;
};

Scene makeScene(uint64_t seed) {
  Rng rng(seed);
  Scene s;
  s.background = static_cast<int>(rng.integer(0, 3));
  for (int c = 0; c < 3; ++c) {
    s.c0[c] = rng.uniform(0.05, 0.95);
    s.c1[c] = rng.uniform(0.05, 0.95);
  }
  s.freq = rng.uniform(1.0, 5.0);
  s.angle = rng.uniform(0, M_PI);
  s.drift_x = rng.uniform(-0.01, 0.01);
  s.drift_y = rng.uniform(-0.01, 0.01);
  const int n = static_cast<int>(rng.integer(2, 5));
  for (int i = 0; i < n; ++i) {
    Shape sh;
    sh.kind = static_cast<int>(rng.integer(0, 3));
    sh.r = rng.uniform();
    sh.g = rng.uniform();
    sh.b = rng.uniform();
    sh.r2 = rng.uniform();
    sh.g2 = rng.uniform();
    sh.b2 = rng.uniform();
    sh.radius = rng.uniform(0.06, 0.22);
    sh.x0 = rng.uniform(0.1, 0.9);
    sh.y0 = rng.uniform(0.1, 0.9);
    sh.vx = rng.uniform(-0.03, 0.03);
    sh.vy = rng.uniform(-0.03, 0.03);
    sh.angle0 = rng.uniform(0, 2 * M_PI);
    sh.spin = rng.uniform(-0.15, 0.15);
    sh.stripe_freq = rng.uniform(4, 12);
    s.shapes.push_back(sh);
  }
  return s;
}

/// Reflects x into [0, 1] (a bouncing trajectory).
double bounce(double x) {
  double m = std::fmod(std::fabs(x), 2.0);
  return m > 1.0 ? 2.0 - m : m;
}

class SyntheticSource : public ClipSource {
 public:
  SyntheticSource(int64_t clips, uint64_t seed, const SyntheticScenes& scenes)
      : clips_(clips), seed_(seed), scenes_(scenes) {}
  int64_t size() const override { return clips_; }
  std::string name(int64_t index) const override { return "synthetic#" + std::to_string(index); }

  Clip load(int64_t index, const ClipRequest& req) const override {
    Scene scene = makeScene(splitmix(seed_ ^ splitmix(static_cast<uint64_t>(index) + 1)));
    if (!scenes_.texture) smoothen(scene);
    simplify(scene, scenes_);
    Rng aug(req.seed);
    const int64_t stride = aug.integer(1, req.stride_max);
    const double t0 = aug.uniform(0, 50);
    const int64_t T = req.frames, S = req.size;
    const double scene_size = static_cast<double>(req.scene_size > 0 ? req.scene_size : S);
    // zoom: the side of the scene's crop (a random square crop of the scene, as for files); the clip is the window
    // of S of its scene_size pixels across, at an offset drawn over the whole crop. S / scene_size is 1.0 exactly
    // when scene_size is 0 or S, so the default clips are the same to the bit as before the key.
    const double zoom = aug.uniform(req.crop_min, 1.0);
    const double window = zoom * (static_cast<double>(S) / scene_size);
    const double ox = aug.uniform(0, 1 - window), oy = aug.uniform(0, 1 - window);
    auto out = torch::empty({T, 3, S, S}, torch::kFloat);
    float* data = out.data_ptr<float>();
    const double pix = zoom / scene_size;
    // What depends on the scene or the frame only is computed once, not per pixel, and pixels far from a shape skip
    // it: the renderer runs beside the ranks on their cores (per 12 x 64x64 clip 1.7 ms, 5.3 ms with all of it per
    // pixel; the same bytes either way).
    const double bg_cos = std::cos(scene.angle), bg_sin = std::sin(scene.angle);
    std::vector<Pose> poses(scene.shapes.size());
    for (int64_t t = 0; t < T; ++t) {
      const double time = t0 + static_cast<double>(t * stride);
      for (size_t i = 0; i < poses.size(); ++i) poses[i] = pose(scene.shapes[i], time);
      for (int64_t y = 0; y < S; ++y) {
        for (int64_t x = 0; x < S; ++x) {
          const double u = ox + (static_cast<double>(x) + 0.5) * pix;
          const double v = oy + (static_cast<double>(y) + 0.5) * pix;
          double col[3];
          background(scene, bg_cos, bg_sin, u + scene.drift_x * time, v + scene.drift_y * time, col);
          for (size_t i = 0; i < poses.size(); ++i) drawShape(scene.shapes[i], poses[i], u, v, pix, col);
          for (int c = 0; c < 3; ++c) {
            data[((t * 3 + c) * S + y) * S + x] = static_cast<float>(std::clamp(col[c], 0.0, 1.0));
          }
        }
      }
    }
    return Clip{out, {}};
  }

 private:
  /// A shape's centre and rotation in one frame.
  struct Pose {
    double cx, cy, cos_a, sin_a;
  };

  static Pose pose(const Shape& sh, double time) {
    const double a = sh.angle0 + sh.spin * time;
    return {0.1 + 0.8 * bounce(sh.x0 + sh.vx * time), 0.1 + 0.8 * bounce(sh.y0 + sh.vy * time), std::cos(a),
            std::sin(a)};
  }

  /// `ca`, `sa`: cos and sin of s.angle.
  static void background(const Scene& s, double ca, double sa, double u, double v, double* col) {
    const double w = u * ca + v * sa;
    double m = 0;
    switch (s.background) {
      case 0: m = bounce(w); break;
      case 1: m = 0.5 + 0.5 * std::sin(2 * M_PI * s.freq * w); break;
      case 2: {
        const int a = static_cast<int>(std::floor(u * s.freq)), b = static_cast<int>(std::floor(v * s.freq));
        m = ((a + b) & 1) ? 0.8 : 0.2;
        break;
      }
      default:
        m = 0.5 + 0.25 * std::sin(2 * M_PI * s.freq * u) + 0.25 * std::cos(2 * M_PI * s.freq * 0.7 * v + w);
    }
    for (int c = 0; c < 3; ++c) col[c] = s.c0[c] * (1 - m) + s.c1[c] * m;
  }

  static void drawShape(const Shape& sh, const Pose& at, double u, double v, double pix, double* col) {
    const double dx = u - at.cx, dy = v - at.cy;
    // Outside every kind's extent (a box's corner is at 1.17 radius) by more than a pixel: alpha would be 0.
    if (std::max(std::fabs(dx), std::fabs(dy)) > 1.25 * sh.radius + pix) return;
    const double lx = dx * at.cos_a + dy * at.sin_a, ly = -dx * at.sin_a + dy * at.cos_a;
    double sd;  // signed distance, negative inside
    switch (sh.kind) {
      case 1: sd = std::max(std::fabs(lx) - sh.radius, std::fabs(ly) - sh.radius * 0.6); break;
      case 2: sd = std::fabs(std::hypot(lx, ly) - sh.radius * 0.75) - sh.radius * 0.25; break;
      default: sd = std::hypot(lx, ly) - sh.radius;
    }
    const double alpha = std::clamp(0.5 - sd / pix, 0.0, 1.0);  // ~1 pixel anti-aliased edge
    if (alpha <= 0) return;
    double m = 0;
    if (sh.kind == 3 || sh.kind == 1) m = 0.5 + 0.5 * std::sin(2 * M_PI * sh.stripe_freq * lx);
    const double rgb[3] = {sh.r * (1 - m) + sh.r2 * m, sh.g * (1 - m) + sh.g2 * m, sh.b * (1 - m) + sh.b2 * m};
    for (int c = 0; c < 3; ++c) col[c] = col[c] * (1 - alpha) + rgb[c] * alpha;
  }

  /// Same scene without high-frequency texture: stripes/checker backgrounds become a gradient or a sinusoid of
  /// at most ~1.5 cycles per unit, shapes are solid (no stripes). The random draws are unchanged.
  static void smoothen(Scene& s) {
    s.background = (s.background == 1 || s.background == 3) ? 3 : 0;
    s.freq = 0.5 + (s.freq - 1.0) / 4.0;  // [1, 5] -> [0.5, 1.5]
    for (auto& sh : s.shapes) {
      if (sh.kind == 3) sh.kind = 0;
      sh.stripe_freq = 0;  // sin(0) = 0: m = 0.5, a solid blend of the two colours
    }
  }

  /// The options that change a scene after its draws: fewer shapes, larger shapes, a flat background.
  static void simplify(Scene& s, const SyntheticScenes& o) {
    if (static_cast<int64_t>(s.shapes.size()) > o.max_shapes) s.shapes.resize(static_cast<size_t>(o.max_shapes));
    for (auto& sh : s.shapes) sh.radius *= o.shape_scale;
    if (o.flat_background) {
      s.background = 0;
      for (int c = 0; c < 3; ++c) s.c1[c] = s.c0[c];  // the gradient between one colour and itself
    }
  }

  int64_t clips_;
  uint64_t seed_;
  SyntheticScenes scenes_;
};

// --------------------------------------------------------------------------------------------------------
// File sources.
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

SyntheticScenes syntheticScenes(const DataConfig& data) {
  SyntheticScenes scenes;
  scenes.texture = data.synthetic_texture;
  scenes.max_shapes = data.synthetic_shapes;
  scenes.shape_scale = data.synthetic_shape_scale;
  scenes.flat_background = data.synthetic_flat_background;
  return scenes;
}

std::unique_ptr<ClipSource> makeSyntheticSource(int64_t clips, uint64_t seed, const SyntheticScenes& scenes) {
  return std::make_unique<SyntheticSource>(clips, seed, scenes);
}

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

std::unique_ptr<ClipSource> makeSource(const DataConfig& data, uint64_t seed) {
  if (data.source == "synthetic") return makeSyntheticSource(data.synthetic_clips, seed, syntheticScenes(data));
  return makeFileSource(data.source);
}

// --------------------------------------------------------------------------------------------------------
EvalClips::EvalClips(const Config& cfg, uint64_t seed)
    : request_{cfg.eval.frames > 0 ? cfg.eval.frames : cfg.data.frames,
               cfg.eval.size > 0 ? cfg.eval.size : cfg.data.size, cfg.data.stride_max, cfg.data.crop_min, 0,
               0},  // scene size 0: whole scenes at the eval size, not data.synthetic_scene_size
      seed_(splitmix(seed ^ 0x6576616c756174ull)),  // "evaluat": draws unrelated to any training sample's
      clips_(cfg.eval.clips) {
  if (cfg.data.source == "synthetic") {
    // One more source of the same seed, longer by the eval clips: items [synthetic_clips, +clips) are scenes
    // the training source (synthetic_clips items) can never return.
    source_ = makeSyntheticSource(cfg.data.synthetic_clips + clips_, seed, syntheticScenes(cfg.data));
    first_ = cfg.data.synthetic_clips;
    held_out_ = true;
  } else {
    source_ = makeFileSource(cfg.data.source);
  }
}

int64_t EvalClips::item(int64_t k) const {
  return held_out_ ? first_ + k : k % source_->size();
}

Clip EvalClips::load(int64_t k) const {
  ClipRequest req = request_;
  req.seed = splitmix(seed_ + static_cast<uint64_t>(k));
  return source_->load(item(k), req);
}

// --------------------------------------------------------------------------------------------------------
SampleOrder::SampleOrder(int64_t dataset_size, uint64_t seed) : n_(dataset_size), seed_(seed) {
  if (n_ < 1) throw DataError("the dataset is empty");
}

const std::vector<int64_t>& SampleOrder::permutation(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) cached_[static_cast<size_t>(i)] = i;
    Rng rng(seed_ * 0x100000001b3ull + static_cast<uint64_t>(epoch) + 0x51ed);
    for (int64_t i = n_ - 1; i > 0; --i) std::swap(cached_[static_cast<size_t>(i)], cached_[rng.next() % (i + 1)]);
    cached_epoch_ = epoch;
  }
  return cached_;
}

int64_t SampleOrder::itemAt(int64_t position) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return permutation(position / n_)[static_cast<size_t>(position % n_)];
}

uint64_t SampleOrder::sampleSeed(int64_t position) const {
  return splitmix(seed_ ^ splitmix(static_cast<uint64_t>(position) ^ 0xa5a5a5a5ull));
}

// --------------------------------------------------------------------------------------------------------
Loader::Loader(std::shared_ptr<const ClipSource> source, const DataConfig& data, uint64_t seed, Layout layout,
               int64_t prefetch)
    : source_(std::move(source)),
      data_(data),
      order_(source_->size(), seed),
      layout_(layout),
      prefetch_(static_cast<size_t>(std::max<int64_t>(1, prefetch))) {
  thread_ = std::thread([this] { run(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Clip Loader::loadWithSkip(int64_t position) {
  const int64_t n = source_->size();
  const int64_t first = order_.itemAt(position);
  ClipRequest req{data_.frames, data_.size, data_.stride_max, data_.crop_min, order_.sampleSeed(position),
                  data_.synthetic_scene_size};
  for (int64_t k = 0; k < n; ++k) {
    const int64_t item = (first + k) % n;
    if (bad_.count(item)) continue;
    try {
      Clip clip = source_->load(item, req);
      std::lock_guard<std::mutex> lock(mutex_);
      read_.push_back(item);
      return clip;
    } catch (const DataError& e) {
      bad_.insert(item);
      ++skipped_count_;
      std::fprintf(stderr, "[rank %lld] warning: skipping unreadable item %s: %s\n",
                   static_cast<long long>(layout_.rank), source_->name(item).c_str(), e.what());
      std::fflush(stderr);
    }
  }
  throw DataError("no readable item in data.source '" + data_.source + "' (" + std::to_string(n) +
                  " items, all unreadable)");
}

void Loader::run() {
  try {
    for (int64_t s = 0;; ++s) {
      for (int64_t a = 0; a < layout_.accum; ++a) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] { return stop_ || queue_.size() < prefetch_; });
          if (stop_) return;
        }
        std::vector<torch::Tensor> frames, latents;
        for (int64_t j = 0; j < layout_.batch; ++j) {
          const int64_t pos = SampleOrder::position(layout_.base, s, a, layout_.rank, j, layout_.accum,
                                                    layout_.world, layout_.batch);
          Clip clip = loadWithSkip(pos);
          frames.push_back(clip.frames);
          if (clip.latents.defined()) latents.push_back(clip.latents);
        }
        Batch b;
        b.frames = torch::stack(frames);
        if (!latents.empty() && latents.size() == frames.size()) b.latents = torch::stack(latents);
        b.step = layout_.first_step + s;
        b.micro = a;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          queue_.push_back(std::move(b));
        }
        cv_.notify_all();
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

Batch Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !queue_.empty() || error_; });
  if (queue_.empty() && error_) std::rethrow_exception(error_);
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return b;
}

std::vector<int64_t> Loader::itemsRead() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
  return read_;
}

}  // namespace taehv::train
