// Deterministic random numbers for initialisation, benchmarks and synthetic
// data: the same seed gives the same numbers on every platform and standard
// library (std::*_distribution does not promise that).
//
//   SplitMix64      a 64-bit generator and seed mixer.
//   Xoshiro256pp    a fast generator for long streams, seeded by SplitMix64.
//   ZipfSampler     Zipf(alpha) over ranks [0, n) by rejection-inversion
//                   (Hoermann & Derflinger 1996): O(1) per draw, no tables.
//   LfsrScrambler   a bijection of [0, n) built from a Galois LFSR with
//                   cycle-walking; it spreads the hot ranks of a Zipf stream
//                   across a table (thesis 5.4.1.1), differently per seed.
//
// Thread safety: none of these types is shared between threads; give each
// thread its own, seeded from (seed, thread or chunk id).
#ifndef CEMB_BASE_RANDOM_H_
#define CEMB_BASE_RANDOM_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

namespace cemb {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // One mixed value of (a, b): a seed for stream `b` of seed `a`.
  static uint64_t Mix(uint64_t a, uint64_t b) {
    SplitMix64 g(a ^ (b * 0xd1b54a32d192ed03ULL));
    return g();
  }

 private:
  uint64_t state_;
};

class Xoshiro256pp {
 public:
  explicit Xoshiro256pp(uint64_t seed) {
    SplitMix64 g(seed);
    for (uint64_t& s : s_) s = g();
  }
  uint64_t operator()() {
    const uint64_t result = std::rotl(s_[0] + s_[3], 23) + s_[0];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift; bias below 2^-32 for
  // n < 2^32, which is far below what a benchmark or a test can see).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>((*this)()) * n) >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// Fills `out` with N(0, stddev^2) values (Box-Muller over Xoshiro256pp).
inline void FillNormal(std::span<float> out, double stddev, uint64_t seed) {
  Xoshiro256pp rng(seed);
  for (size_t i = 0; i < out.size(); i += 2) {
    const double u1 = 1.0 - rng.Uniform();  // (0, 1]
    const double u2 = rng.Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    out[i] = static_cast<float>(r * std::cos(2.0 * M_PI * u2));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
  }
}

// Zipf(alpha) over ranks [0, n): P(rank k) is proportional to 1/(k+1)^alpha.
// alpha > 0 (alpha = 1 is the thesis' and the setting).
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double alpha)
      : n_(static_cast<double>(n)), alpha_(alpha) {
    h_integral_x1_ = HIntegral(1.5) - 1.0;
    h_integral_n_ = HIntegral(n_ + 0.5);
    s_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
  }

  template <typename Rng>
  uint64_t operator()(Rng& rng) const {
    while (true) {
      const double u = h_integral_n_ + rng.Uniform() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1.0) k = 1.0;
      if (k > n_) k = n_;
      if (k - x <= s_ || u >= HIntegral(k + 0.5) - H(k)) {
        return static_cast<uint64_t>(k) - 1;
      }
    }
  }

 private:
  // H(x) = integral of h(x) = x^-alpha; helpers stable near alpha = 1.
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - alpha_) * log_x) * log_x;
  }
  double H(double x) const { return std::exp(-alpha_ * std::log(x)); }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - alpha_);
    if (t < -1.0) t = -1.0;
    return std::exp(Helper1(t) * x);
  }
  static double Helper1(double x) {  // log(1+x)/x
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {  // (exp(x)-1)/x
    return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  double n_, alpha_;
  double h_integral_x1_, h_integral_n_, s_;
};

// Galois LFSR feedback masks of maximal length (period 2^k - 1), k = 2..40.
inline constexpr uint64_t kLfsrTaps[41] = {
    0, 0, 0x3, 0x6, 0xC, 0x14, 0x30, 0x60, 0xB8, 0x110, 0x240, 0x500, 0x829,
    0x100D, 0x2015, 0x6000, 0xD008, 0x12000, 0x20400, 0x40023, 0x90000,
    0x140000, 0x300000, 0x420000, 0xE10000, 0x1200000, 0x2000023, 0x4000013,
    0x9000000, 0x14000000, 0x20000029, 0x48000000, 0x80200003, 0x100080000,
    0x204000003, 0x500000000, 0x801000000, 0x100000001F, 0x2000000031,
    0x4400000000, 0xA000140000};

// One step of the Galois LFSR of width k: a bijection of [1, 2^k).
inline uint64_t LfsrStep(uint64_t x, int k) {
  return (x >> 1) ^ ((x & 1) ? kLfsrTaps[k] : 0);
}

// A bijection of [0, n) (n >= 1): rank r goes to the LFSR state reached from
// r + 1 after `steps` steps, walked again until it lands in [1, n].
class LfsrScrambler {
 public:
  LfsrScrambler(uint64_t n, uint64_t seed) : n_(n) {
    k_ = 2;
    while (k_ < 40 && ((uint64_t{1} << k_) - 1) < n) ++k_;
    steps_ = k_ + static_cast<int>(SplitMix64::Mix(seed, 0x1f5a) % (2 * k_));
  }
  uint64_t operator()(uint64_t rank) const {
    if (n_ <= 1) return 0;
    uint64_t x = rank + 1;
    do {
      for (int i = 0; i < steps_; ++i) x = LfsrStep(x, k_);
    } while (x > n_);
    return x - 1;
  }
  int width() const { return k_; }

 private:
  uint64_t n_;
  int k_;
  int steps_;
};

}  // namespace cemb

#endif  // CEMB_BASE_RANDOM_H_
