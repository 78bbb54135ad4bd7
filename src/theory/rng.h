// rng.h — the small, seeded, platform-independent random generator used by theory/.
// SplitMix64 (Steele, Lea & Flood 2014) with hand-written uniform, integer and normal draws, so a
// seed gives the same numbers with every compiler and standard library (std:: distributions do not
// promise that). Independent streams come from theory_stream(seed, purpose).
// Not a general-purpose or cryptographic RNG; not thread-safe (one Rng per simulation).
#pragma once
#include <cmath>
#include <cstdint>

namespace phasescope {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // next 64 random bits (SplitMix64)
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // uniform in [0, 1), 53 random bits
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // uniform integer in [0, n), n >= 1, without modulo bias
  int below(int n) {
    const uint64_t un = static_cast<uint64_t>(n);
    const uint64_t limit = UINT64_MAX - UINT64_MAX % un;
    uint64_t x = next();
    while (x >= limit) x = next();
    return static_cast<int>(x % un);
  }

  // standard normal (Box-Muller, one value per call; no cached second value to keep state simple)
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// Purposes of the independent streams one simulation seed is split into.
enum TheoryStream : uint64_t {
  THEORY_STREAM_INIT = 1,        // gate parameters in the ball of radius rho
  THEORY_STREAM_EMBEDDINGS = 2,  // the epsilon perturbation of the embeddings
  THEORY_STREAM_TRAIN = 3,       // contexts drawn at each gradient step
  THEORY_STREAM_EVAL = 4,        // the fixed evaluation contexts
};

// A seed for stream `purpose` of simulation `seed` (two SplitMix64 rounds over both words).
inline uint64_t theory_stream(uint64_t seed, uint64_t purpose) {
  Rng r(seed * 0x2545F4914F6CDD1Dull + purpose);
  r.next();
  return r.next();
}

}  // namespace phasescope
