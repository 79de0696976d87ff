// base/timer.h: the seconds of a scope or a lap go to the counter named,
// none to a null one. The checks rest on the steady clock never running
// behind a sleep, not on how fast anything is.
#include "base/timer.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace cemb {
namespace {

using namespace std::chrono_literals;

TEST(ScopedSeconds, AddsItsScopesSecondsToTheCounter) {
  double seconds = 1.0;  // added to, not overwritten
  {
    ScopedSeconds timer(&seconds);
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_GE(seconds, 1.002);
  { ScopedSeconds nothing(nullptr); }  // a null counter times nothing
}

TEST(LapSeconds, EachLapGoesToItsOwnCounter) {
  double a = 0, b = 0;
  LapSeconds laps;
  std::this_thread::sleep_for(2ms);
  laps.Lap(&a);
  EXPECT_GE(a, 0.002);
  EXPECT_EQ(b, 0.0);
  std::this_thread::sleep_for(2ms);
  laps.Lap(&b);
  EXPECT_GE(b, 0.002);
  laps.Skip();
  laps.Lap(nullptr);  // a null counter times nothing
}

}  // namespace
}  // namespace cemb
