#include "winograd_grad.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

// The weight gradient of one tile pair is G^T [(A dY A^T) . (B^T X B)] G: dY a 4x4 tile of the output gradient, X
// the 6x6 tile of the padded input that the 4x4 outputs saw, `.` the element-wise product; summed over every tile
// of every image, the product becomes 36 matrix products (Co x tiles) x (tiles x Ci), one per element of the 6x6
// transformed tile. B^T, G and A^T are F(4x4, 3x3)'s (the forward algorithm; the weight gradient is its transpose).
// The transforms run on channels-last copies of X and dY, so that each step of a transform is one loop over the
// channels, which the compiler vectorises (on x86-64 a clone for x86-64-v3, AVX2 and FMA, picked at load time).
namespace taehv::detail {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define TAEHV_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TAEHV_VECTOR_CLONES
#endif
#define TAEHV_INLINE inline __attribute__((always_inline))

constexpr int64_t kTile = 4;    // output-gradient pixels per tile side
constexpr int64_t kAlpha = 6;   // transformed tile side
constexpr int64_t kPositions = kAlpha * kAlpha;

// out = B^T d over `n` channels: d[0..5] and out[0..5] each point at n floats.
TAEHV_INLINE void inputTransform(const float* __restrict d0, const float* __restrict d1,
                                 const float* __restrict d2, const float* __restrict d3,
                                 const float* __restrict d4, const float* __restrict d5, float* __restrict o0,
                                 float* __restrict o1, float* __restrict o2, float* __restrict o3,
                                 float* __restrict o4, float* __restrict o5, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float a = d1[c], b = d2[c], e = d3[c], f = d4[c];
    o0[c] = 4.f * d0[c] - 5.f * b + f;
    o1[c] = f + e - 4.f * (a + b);
    o2[c] = f - e + 4.f * (a - b);
    o3[c] = f - b + 2.f * (e - a);
    o4[c] = f - b - 2.f * (e - a);
    o5[c] = 4.f * a - 5.f * e + d5[c];
  }
}

// out = A g over `n` channels (A = (A^T)^T, 6x4): g[0..3], out[0..5].
TAEHV_INLINE void gradTransform(const float* __restrict g0, const float* __restrict g1,
                                const float* __restrict g2, const float* __restrict g3, float* __restrict o0,
                                float* __restrict o1, float* __restrict o2, float* __restrict o3,
                                float* __restrict o4, float* __restrict o5, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float a = g0[c], b = g1[c], e = g2[c], f = g3[c];
    const float even = a + e, odd = b + f;
    const float even4 = a + 4.f * e, odd8 = 2.f * b + 8.f * f;
    o0[c] = a;
    o1[c] = even + odd;
    o2[c] = even - odd;
    o3[c] = even4 + odd8;
    o4[c] = even4 - odd8;
    o5[c] = f;
  }
}

// out = G^T m over `n` elements (G^T 3x6): m[0..5], out[0..2].
TAEHV_INLINE void outputTransform(const float* __restrict m0, const float* __restrict m1,
                                  const float* __restrict m2, const float* __restrict m3,
                                  const float* __restrict m4, const float* __restrict m5, float* __restrict o0,
                                  float* __restrict o1, float* __restrict o2, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float s12 = m1[c] + m2[c], d12 = m2[c] - m1[c], s34 = m3[c] + m4[c], d34 = m3[c] - m4[c];
    o0[c] = 0.25f * m0[c] - s12 * (1.f / 6) + s34 * (1.f / 24);
    o1[c] = d12 * (1.f / 6) + d34 * (1.f / 12);
    o2[c] = (s34 - s12) * (1.f / 6) + m5[c];
  }
}

// dst (N, H*W, C) = src (N, C, H*W) through 8x8 blocks held in registers (the remainder element by element): ATen's
// permuting copy of a 48x64x32x32 tensor took 10-16 ms on one Zen 3 core (its source rows 4 KiB apart), this 3.6 ms
// (a plain copy of it: 1.3 ms).
TAEHV_VECTOR_CLONES void toChannelsLast(const float* src, float* dst, int64_t images, int64_t channels,
                                        int64_t pixels) {
  constexpr int64_t kBlock = 8;
  const int64_t channels_in_blocks = channels - channels % kBlock, pixels_in_blocks = pixels - pixels % kBlock;
  for (int64_t n = 0; n < images; ++n) {
    const float* s = src + n * channels * pixels;
    float* d = dst + n * channels * pixels;
    for (int64_t c0 = 0; c0 < channels_in_blocks; c0 += kBlock) {
      for (int64_t p0 = 0; p0 < pixels_in_blocks; p0 += kBlock) {
        float block[kBlock][kBlock];
        for (int64_t i = 0; i < kBlock; ++i) {
          for (int64_t j = 0; j < kBlock; ++j) block[j][i] = s[(c0 + i) * pixels + p0 + j];
        }
        for (int64_t j = 0; j < kBlock; ++j) {
          for (int64_t i = 0; i < kBlock; ++i) d[(p0 + j) * channels + c0 + i] = block[j][i];
        }
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t p = c < channels_in_blocks ? pixels_in_blocks : 0; p < pixels; ++p) {
        d[p * channels + c] = s[c * pixels + p];
      }
    }
  }
}

torch::Tensor channelsLastCopy(const torch::Tensor& x) {
  const torch::Tensor src = x.contiguous();
  torch::Tensor dst = torch::empty({x.size(0), x.size(2), x.size(3), x.size(1)}, x.options());
  toChannelsLast(src.data_ptr<float>(), dst.data_ptr<float>(), x.size(0), x.size(1), x.size(2) * x.size(3));
  return dst;
}

struct Geometry {
  int64_t n, h, w, tiles_h, tiles_w;
  int64_t tiles() const { return n * tiles_h * tiles_w; }
};

// The tiles [begin, begin + tiles) whose transforms are held at once (see winogradWeightGrad), in buffers of
// `capacity` tiles a position.
struct Chunk {
  int64_t begin, tiles, capacity;
};

// V[pos][t - chunk.begin][c] = (B^T X B)[pos] of tile t for t in [t_begin, t_end), from x (N, H, W, C) with a zero
// border of 1.
TAEHV_VECTOR_CLONES void transformInputTiles(const float* x, int64_t channels, const Geometry& g, const Chunk& chunk,
                                             float* v, int64_t t_begin, int64_t t_end) {
  const std::vector<float> zeros(static_cast<size_t>(channels), 0.f);
  std::vector<float> rows(static_cast<size_t>(kPositions * channels));  // [i][l][c]: B^T applied down the columns
  const int64_t stride_t = channels, stride_pos = chunk.capacity * channels;
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t q = t % g.tiles_w, p = (t / g.tiles_w) % g.tiles_h, n = t / (g.tiles_w * g.tiles_h);
    for (int64_t l = 0; l < kAlpha; ++l) {
      const int64_t col = q * kTile - 1 + l;
      std::array<const float*, kAlpha> d;
      std::array<float*, kAlpha> out;
      for (int64_t j = 0; j < kAlpha; ++j) {
        const int64_t row = p * kTile - 1 + j;
        d[j] = row >= 0 && row < g.h && col >= 0 && col < g.w ? x + ((n * g.h + row) * g.w + col) * channels
                                                              : zeros.data();
        out[j] = rows.data() + (j * kAlpha + l) * channels;
      }
      inputTransform(d[0], d[1], d[2], d[3], d[4], d[5], out[0], out[1], out[2], out[3], out[4], out[5], channels);
    }
    for (int64_t i = 0; i < kAlpha; ++i) {
      std::array<const float*, kAlpha> d;
      std::array<float*, kAlpha> out;
      for (int64_t k = 0; k < kAlpha; ++k) {
        d[k] = rows.data() + (i * kAlpha + k) * channels;
        out[k] = v + (i * kAlpha + k) * stride_pos + (t - chunk.begin) * stride_t;
      }
      inputTransform(d[0], d[1], d[2], d[3], d[4], d[5], out[0], out[1], out[2], out[3], out[4], out[5], channels);
    }
  }
}

// U[pos][t - chunk.begin][c] = (A dY A^T)[pos] of tile t for t in [t_begin, t_end), from gy (N, H, W, C).
TAEHV_VECTOR_CLONES void transformGradTiles(const float* gy, int64_t channels, const Geometry& g, const Chunk& chunk,
                                            float* u, int64_t t_begin, int64_t t_end) {
  std::vector<float> rows(static_cast<size_t>(kAlpha * kTile * channels));  // [i][l][c]
  const int64_t stride_t = channels, stride_pos = chunk.capacity * channels;
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t q = t % g.tiles_w, p = (t / g.tiles_w) % g.tiles_h, n = t / (g.tiles_w * g.tiles_h);
    for (int64_t l = 0; l < kTile; ++l) {
      std::array<const float*, kTile> d;
      std::array<float*, kAlpha> out;
      for (int64_t j = 0; j < kTile; ++j) d[j] = gy + ((n * g.h + p * kTile + j) * g.w + q * kTile + l) * channels;
      for (int64_t i = 0; i < kAlpha; ++i) out[i] = rows.data() + (i * kTile + l) * channels;
      gradTransform(d[0], d[1], d[2], d[3], out[0], out[1], out[2], out[3], out[4], out[5], channels);
    }
    for (int64_t i = 0; i < kAlpha; ++i) {
      std::array<const float*, kTile> d;
      std::array<float*, kAlpha> out;
      for (int64_t l = 0; l < kTile; ++l) d[l] = rows.data() + (i * kTile + l) * channels;
      for (int64_t k = 0; k < kAlpha; ++k) {
        out[k] = u + (i * kAlpha + k) * stride_pos + (t - chunk.begin) * stride_t;
      }
      gradTransform(d[0], d[1], d[2], d[3], out[0], out[1], out[2], out[3], out[4], out[5], channels);
    }
  }
}

// dw[a][b][z] = (G^T M G)[a][b] of the 36 products m[pos][z], z over the (Co, Ci) pairs.
TAEHV_VECTOR_CLONES void transformProducts(const float* m, int64_t pairs, float* dw) {
  std::vector<float> rows(static_cast<size_t>(3 * kAlpha * pairs));  // [a][k][z]: G^T applied down the columns
  for (int64_t k = 0; k < kAlpha; ++k) {
    std::array<const float*, kAlpha> d;
    std::array<float*, 3> out;
    for (int64_t i = 0; i < kAlpha; ++i) d[i] = m + (i * kAlpha + k) * pairs;
    for (int64_t a = 0; a < 3; ++a) out[a] = rows.data() + (a * kAlpha + k) * pairs;
    outputTransform(d[0], d[1], d[2], d[3], d[4], d[5], out[0], out[1], out[2], pairs);
  }
  for (int64_t a = 0; a < 3; ++a) {
    std::array<const float*, kAlpha> d;
    std::array<float*, 3> out;
    for (int64_t k = 0; k < kAlpha; ++k) d[k] = rows.data() + (a * kAlpha + k) * pairs;
    for (int64_t b = 0; b < 3; ++b) out[b] = dw + (a * 3 + b) * pairs;
    outputTransform(d[0], d[1], d[2], d[3], d[4], d[5], out[0], out[1], out[2], pairs);
  }
}

}  // namespace

bool winogradWeightGradFits(const torch::Tensor& x, const torch::Tensor& gy) {
  return x.dim() == 4 && gy.dim() == 4 && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
         gy.scalar_type() == torch::kFloat32 && x.size(0) == gy.size(0) && x.size(2) == gy.size(2) &&
         x.size(3) == gy.size(3) && x.size(2) % kTile == 0 && x.size(3) % kTile == 0 && x.numel() > 0 &&
         gy.numel() > 0;
}

torch::Tensor winogradWeightGrad(const torch::Tensor& x, const torch::Tensor& gy) {
  TORCH_CHECK(winogradWeightGradFits(x, gy), "winogradWeightGrad: fp32 CPU tensors (N, C, H, W) with H and W "
                                             "multiples of 4 expected, got ",
              x.sizes(), " and ", gy.sizes());
  torch::NoGradGuard no_grad;
  const int64_t ci = x.size(1), co = gy.size(1);
  const Geometry g{x.size(0), x.size(2), x.size(3), x.size(2) / kTile, x.size(3) / kTile};
  const torch::Tensor xl = channelsLastCopy(x);
  const torch::Tensor gl = channelsLastCopy(gy);
  const auto options = x.options();
  // The transforms of 512 tiles at a time (of 64 + 64 channels: 9.4 MB, against 57 MB for all 3072 tiles of a 48 x
  // 32x32 batch), their products added up in M: K = 512 keeps the matrix products efficient.
  constexpr int64_t kChunkTiles = 512;
  const int64_t chunk_tiles = std::min(kChunkTiles, g.tiles());
  torch::Tensor v = torch::empty({kPositions, chunk_tiles, ci}, options);
  torch::Tensor u = torch::empty({kPositions, chunk_tiles, co}, options);
  torch::Tensor m = torch::empty({kPositions, co, ci}, options);
  for (int64_t begin = 0; begin < g.tiles(); begin += chunk_tiles) {
    const Chunk chunk{begin, std::min(chunk_tiles, g.tiles() - begin), chunk_tiles};
    // Tiles of 64 channels' transform take ~1 us each: a grain of 64 tiles keeps a thread's share well above the
    // cost of handing it out.
    at::parallel_for(chunk.begin, chunk.begin + chunk.tiles, 64, [&](int64_t t_begin, int64_t t_end) {
      transformInputTiles(xl.data_ptr<float>(), ci, g, chunk, v.data_ptr<float>(), t_begin, t_end);
      transformGradTiles(gl.data_ptr<float>(), co, g, chunk, u.data_ptr<float>(), t_begin, t_end);
    });
    const torch::Tensor uc = u.narrow(1, 0, chunk.tiles).transpose(1, 2), vc = v.narrow(1, 0, chunk.tiles);
    if (begin == 0) {
      at::bmm_out(m, uc, vc);  // (36, Co, Ci)
    } else {
      m.baddbmm_(uc, vc);
    }
  }
  torch::Tensor dw = torch::empty({3, 3, co, ci}, options);
  transformProducts(m.data_ptr<float>(), co * ci, dw.data_ptr<float>());
  return dw.permute({2, 3, 0, 1}).contiguous();
}

}  // namespace taehv::detail
