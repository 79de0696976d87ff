#include "cache/admission.h"

#include "gtest/gtest.h"

namespace cemb {
namespace {

TEST(AdmissionFilter, AdmitsOnTheKthSighting) {
  AdmissionFilter f(3, 1024);
  EXPECT_TRUE(f.enabled());
  EXPECT_FALSE(f.observe(42));
  EXPECT_FALSE(f.observe(42));
  EXPECT_TRUE(f.observe(42));
  EXPECT_TRUE(f.observe(42));
  EXPECT_EQ(f.estimate(42), 4);
  EXPECT_EQ(f.estimate(43), 0);
}

TEST(AdmissionFilter, ThresholdOneOrLessAdmitsEverything) {
  AdmissionFilter f(1, 64);
  EXPECT_FALSE(f.enabled());
  EXPECT_TRUE(f.observe(7));
  AdmissionFilter g(0, 64);
  EXPECT_TRUE(g.observe(7));
}

TEST(AdmissionFilter, AgeHalvesAndResetClears) {
  AdmissionFilter f(2, 1000);
  EXPECT_EQ(f.counters(), 1024);
  for (int i = 0; i < 6; ++i) f.observe(5);
  f.age();
  EXPECT_EQ(f.estimate(5), 3);
  f.reset();
  EXPECT_EQ(f.estimate(5), 0);
}

TEST(AdmissionFilter, CountersSaturate) {
  AdmissionFilter f(2, 64);
  for (int i = 0; i < 300; ++i) f.observe(9);
  EXPECT_EQ(f.estimate(9), 255);
}

TEST(AdmissionFilter, FewRowsSeenOnceAreNotAdmitted) {
  AdmissionFilter f(2, 1 << 16);
  int admitted = 0;
  for (int64_t r = 0; r < 1000; ++r) admitted += f.observe(r * 7919);
  EXPECT_LT(admitted, 5);  // only hash collisions in both sketch rows
}

}  // namespace
}  // namespace cemb
