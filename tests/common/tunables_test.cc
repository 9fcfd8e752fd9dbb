#include "common/tunables.h"

#include <gtest/gtest.h>
#include <stdlib.h>

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

}  // namespace hvdrun
