// The synthetic source: procedural scenes (a background and 2-5 moving, rotating shapes) rasterized into clips.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "random.h"
#include "taehv/train/clip_source.h"

namespace taehv::train {
namespace {

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

}  // namespace taehv::train
