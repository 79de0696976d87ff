#include "base/random.h"

#include <cstdint>
#include <vector>

#include "base/checksum.h"
#include "gtest/gtest.h"

namespace cemb {
namespace {

TEST(Lfsr, TapsGiveMaximalPeriodUpTo24Bits) {
  for (int k = 2; k <= 24; ++k) {
    uint64_t x = 1, period = 0;
    do {
      x = LfsrStep(x, k);
      ++period;
    } while (x != 1 && period <= (uint64_t{1} << k));
    EXPECT_EQ(period, (uint64_t{1} << k) - 1) << "k = " << k;
  }
}

TEST(LfsrScrambler, IsABijectionThatDependsOnTheSeed) {
  for (uint64_t n : {1u, 2u, 3u, 1000u, 1460u, 65536u}) {
    const LfsrScrambler a(n, 1), b(n, 2);
    std::vector<bool> seen(n, false);
    int differ = 0;
    for (uint64_t r = 0; r < n; ++r) {
      const uint64_t x = a(r);
      ASSERT_LT(x, n);
      ASSERT_FALSE(seen[x]) << "n " << n << " rank " << r;
      seen[x] = true;
      differ += a(r) != b(r);
    }
    if (n > 100) {
      EXPECT_GT(differ, static_cast<int>(n / 2));
    }
  }
}

TEST(Zipf, RankFrequenciesFollowOneOverRank) {
  const uint64_t n = 1000;
  ZipfSampler zipf(n, 1.0);
  Xoshiro256pp rng(5);
  std::vector<int> count(n, 0);
  const int draws = 400000;
  for (int i = 0; i < draws; ++i) {
    const uint64_t k = zipf(rng);
    ASSERT_LT(k, n);
    ++count[k];
  }
  double h = 0;
  for (uint64_t k = 1; k <= n; ++k) h += 1.0 / k;
  for (uint64_t k : {0u, 1u, 9u, 99u}) {
    const double expected = draws / (h * (k + 1));
    EXPECT_NEAR(count[k], expected, 5 * std::sqrt(expected) + 0.02 * expected) << "rank " << k;
  }
}

TEST(Xoshiro, BelowStaysInRangeAndIsSeeded) {
  Xoshiro256pp a(1), b(1), c(2);
  EXPECT_EQ(a(), b());
  EXPECT_NE(a(), c());
  for (int i = 0; i < 1000; ++i) EXPECT_LT(a.Below(7), 7u);
}

TEST(Checksum64, IndependentOfSplitsSensitiveToBytes) {
  std::vector<unsigned char> data(1001);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 31);
  Checksum64 whole;
  whole.Update(data.data(), data.size());
  Checksum64 parts;
  parts.Update(data.data(), 3);
  parts.Update(data.data() + 3, 500);
  parts.Update(data.data() + 503, 498);
  EXPECT_EQ(whole.Digest(), parts.Digest());
  data[700] ^= 1;
  Checksum64 flipped;
  flipped.Update(data.data(), data.size());
  EXPECT_NE(whole.Digest(), flipped.Digest());
  Checksum64 shorter;
  shorter.Update(data.data(), 1000);
  EXPECT_NE(shorter.Digest(), flipped.Digest());
}

}  // namespace
}  // namespace cemb
