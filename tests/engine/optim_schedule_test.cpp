// Learning-rate schedule (engine/optim/schedule.h) at warm-up start, end of warm-up,
// the middle and the end of the decay, for cosine and linear decay.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "engine/core/error.h"
#include "engine/optim/schedule.h"

namespace driftless::optim {
namespace {

// max 1e-3, min 1e-4, 10 warm-up steps, decay over steps [10, 110).
LrSchedule make(LrDecay d) {
  return {.max_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10, .total_steps = 110, .decay = d};
}

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s = make(LrDecay::cosine);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 1e-4);  // 1e-3 * 1/10: the first step is not wasted
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 9), 1e-3);   // last warm-up step reaches max_lr
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1e-3);  // decay starts at r = 0
  // r = 0.25: 1e-4 + 9e-4 * (1 + cos(pi/4)) / 2 = 1e-4 + 4.5e-4 * 1.7071067812 = 8.6819805e-4
  EXPECT_NEAR(learning_rate(s, 35), 8.6819805153e-4, 1e-13);
  EXPECT_DOUBLE_EQ(learning_rate(s, 60), 5.5e-4);  // middle: (max + min) / 2
  // r = 0.99: 1e-4 + 4.5e-4 * (1 + cos(0.99 pi)) = 1e-4 + 4.5e-4 * 4.9344e-4 = 1.00222e-4
  EXPECT_NEAR(learning_rate(s, 109), 1.0022204783e-4, 1e-14);
  EXPECT_DOUBLE_EQ(learning_rate(s, 110), 1e-4);  // end
  EXPECT_DOUBLE_EQ(learning_rate(s, 10000), 1e-4);
  for (int64_t t = 10; t < 120; ++t) EXPECT_LE(learning_rate(s, t + 1), learning_rate(s, t)) << t;
}

TEST(LrSchedule, WarmupThenLinear) {
  LrSchedule s = make(LrDecay::linear);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(s, 35), 7.75e-4);  // 1e-3 - 9e-4 * 0.25
  EXPECT_DOUBLE_EQ(learning_rate(s, 60), 5.5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 110), 1e-4);
}

TEST(LrSchedule, NoWarmupAndConstant) {
  LrSchedule s = make(LrDecay::cosine);
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 1e-3);
  LrSchedule c = make(LrDecay::constant);
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 50), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(c, 500), 1e-3);
  EXPECT_EQ(lr_decay_from_name("linear"), LrDecay::linear);
}

TEST(LrSchedule, BadScheduleThrows) {
  LrSchedule s = make(LrDecay::cosine);
  s.min_lr = 2e-3;
  EXPECT_THROW(learning_rate(s, 0), Error);
  s = make(LrDecay::cosine);
  s.warmup_steps = 200;
  EXPECT_THROW(learning_rate(s, 0), Error);
  EXPECT_THROW(learning_rate(make(LrDecay::cosine), -1), Error);
  try {
    lr_decay_from_name("cosin");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"cosin\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace driftless::optim
