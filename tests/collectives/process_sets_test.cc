// Process sets' pure parts: a set's ranks, and the handles that carry a set's id.
#include "collectives/process_sets.h"

#include <gtest/gtest.h>

namespace hvdrun {
namespace {

TEST(ProcessSets, RanksAreSortedAndCheckedAgainstTheJob) {
  const int given[] = {3, 0, 2};
  auto r = process_set_ranks(given, 3, 4);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, (std::vector<int>{0, 2, 3}));
  const int twice[] = {1, 1};
  EXPECT_EQ(process_set_ranks(twice, 2, 4).error().message, "process set rank 1 is given twice");
  const int outside[] = {0, 4};
  EXPECT_EQ(process_set_ranks(outside, 2, 4).error().message, "process set rank 4 is not a rank of this job (0..3)");
  EXPECT_EQ(process_set_ranks(given, 0, 4).error().kind, ErrorKind::kInvalidArgument);
  EXPECT_EQ(ranks_text({0, 2, 3}), "0,2,3");
}

TEST(ProcessSets, AHandleCarriesItsSetAndTheEnginesHandle) {
  EXPECT_EQ(set_handle(0, 17), 17) << "the whole job's handles are its engine's";
  const hvd_handle_t h = set_handle(5, 17);
  EXPECT_EQ(handle_set(h), 5);
  EXPECT_EQ(engine_handle(h), 17);
  EXPECT_EQ(handle_set(17), 0);
  EXPECT_GT(set_handle(1, 1), 0);
}

}  // namespace
}  // namespace hvdrun
