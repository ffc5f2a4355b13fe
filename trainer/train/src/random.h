// The training data's random numbers: splitmix64 and a small generator on it, independent of the standard library's
// distributions, so that every platform draws the same clips, crops and sample order from a seed.
#pragma once

#include <cstdint>

namespace taehv::train {

/// splitmix64's mixing step: a well-spread 64-bit value for each input (seeds derived from seeds).
inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A small deterministic generator on splitmix: uniform doubles and inclusive integer ranges.
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

}  // namespace taehv::train
