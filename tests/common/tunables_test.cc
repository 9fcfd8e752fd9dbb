#include "common/tunables.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace hvdrun {

// The environment is the process's: each test sets and unsets what it reads.
TEST(Tunables, IfSetTellsUnsetFromEmpty) {
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_FALSE(tunable_if_set("CUDA_VISIBLE_DEVICES").has_value());
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // set and empty: no device at all, worth saying
  ASSERT_TRUE(tunable_if_set("CUDA_VISIBLE_DEVICES").has_value());
  EXPECT_EQ(*tunable_if_set("CUDA_VISIBLE_DEVICES"), "");
  setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
  EXPECT_EQ(*tunable_if_set("CUDA_VISIBLE_DEVICES"), "1,0");
  unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(Tunables, OurNameBeatsHorovodsAliasAndTheDefaultComesLast) {
  unsetenv("HVDRUN_CYCLE_TIME");
  unsetenv("HOROVOD_CYCLE_TIME");
  EXPECT_FALSE(tunable_if_set("HVDRUN_CYCLE_TIME").has_value());
  EXPECT_EQ(tunable_string("HVDRUN_CYCLE_TIME"), find_tunable("HVDRUN_CYCLE_TIME")->default_value);
  setenv("HOROVOD_CYCLE_TIME", "7", 1);
  EXPECT_EQ(*tunable_if_set("HVDRUN_CYCLE_TIME"), "7");
  setenv("HVDRUN_CYCLE_TIME", "3", 1);
  EXPECT_EQ(tunable_string("HVDRUN_CYCLE_TIME"), "3");
  unsetenv("HVDRUN_CYCLE_TIME");
  unsetenv("HOROVOD_CYCLE_TIME");
}

TEST(Tunables, ANameOutsideTheTableIsAProgrammingError) {
  EXPECT_THROW(tunable_if_set("NOT_A_TUNABLE"), std::logic_error);
}

// Issue 25.6: the ranges live in the one table, beside the defaults, and every numeric
// default lies in its own range ("auto" stands for a number or is decided where it is read).
TEST(Tunables, EveryNumericDefaultLiesInItsRange) {
  int numeric = 0;
  for (const auto& t : all_tunables()) {
    if (t.range.unit.empty()) continue;
    ++numeric;
    std::string v(t.default_value == "auto" ? t.range.auto_means : t.default_value);
    if (v.empty()) {  // "auto" that the reader decides
      EXPECT_EQ(t.default_value, "auto") << t.env;
      continue;
    }
    double d = std::stod(v);
    EXPECT_TRUE((t.range.zero_too && d == 0) || (d >= t.range.min && d <= t.range.max)) << t.env << " " << v;
    EXPECT_EQ(tunable_default(t.env), d) << t.env;
  }
  EXPECT_GE(numeric, 17);
}

// HVDRUN_SPIN_US had no range: hvd_init took "abc" and the worker died on it. Now it is
// refused with the others, naming the value, and its "auto" reads as 20000 in one place.
TEST(Tunables, SpinMicrosecondsAreCheckedAndAutoReadsAsItsNumber) {
  unsetenv("HVDRUN_SPIN_US");
  EXPECT_EQ(tunable_int("HVDRUN_SPIN_US"), 20000);
  EXPECT_TRUE(check_tunables(TunableUse::kWorker));
  setenv("HVDRUN_SPIN_US", "auto", 1);
  EXPECT_TRUE(check_tunables(TunableUse::kWorker));
  EXPECT_EQ(tunable_int("HVDRUN_SPIN_US"), 20000);
  setenv("HVDRUN_SPIN_US", "75", 1);
  EXPECT_TRUE(check_tunables(TunableUse::kWorker));
  EXPECT_EQ(tunable_int("HVDRUN_SPIN_US"), 75);
  setenv("HVDRUN_SPIN_US", "abc", 1);
  auto s = check_tunables(TunableUse::kWorker);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("HVDRUN_SPIN_US"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("abc"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("microseconds"), std::string::npos) << s.error().message;
  unsetenv("HVDRUN_SPIN_US");
}

TEST(Tunables, AutoThatTheReaderDecidesIsToldApart) {
  unsetenv("HVDRUN_SHM_ALLREDUCE_BYTES");
  EXPECT_TRUE(tunable_is_auto("HVDRUN_SHM_ALLREDUCE_BYTES"));
  setenv("HVDRUN_SHM_ALLREDUCE_BYTES", "4096", 1);
  EXPECT_FALSE(tunable_is_auto("HVDRUN_SHM_ALLREDUCE_BYTES"));
  EXPECT_EQ(tunable_int("HVDRUN_SHM_ALLREDUCE_BYTES"), 4096);
  unsetenv("HVDRUN_SHM_ALLREDUCE_BYTES");
}

}  // namespace hvdrun
