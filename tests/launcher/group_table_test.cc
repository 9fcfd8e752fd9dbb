// The watchdog's table of process groups (launcher/group_table): in memory shared with
// the processes forked after it was made.
#include "launcher/group_table.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <vector>

namespace hvdrun {
namespace {

std::vector<int32_t> listed(const GroupTable& t) {
  std::vector<int32_t> out(GroupTable::kSlots);
  out.resize(static_cast<size_t>(t.list(out.data(), GroupTable::kSlots)));
  return out;
}

struct Table {
  GroupTable* t = GroupTable::create();
  ~Table() { GroupTable::destroy(t); }
};

TEST(GroupTable, HoldsWhatWasAddedUntilItIsRemoved) {
  Table tb;
  ASSERT_NE(tb.t, nullptr);
  EXPECT_TRUE(listed(*tb.t).empty());
  EXPECT_TRUE(tb.t->add(101));
  EXPECT_TRUE(tb.t->add(102));
  EXPECT_TRUE(tb.t->add(103));
  EXPECT_EQ(listed(*tb.t), (std::vector<int32_t>{101, 102, 103}));
  EXPECT_TRUE(tb.t->remove(102));
  EXPECT_FALSE(tb.t->remove(102)) << "removed twice";
  EXPECT_FALSE(tb.t->remove(999)) << "never added";
  EXPECT_EQ(listed(*tb.t), (std::vector<int32_t>{101, 103}));
  // A freed slot is taken again before the table grows.
  EXPECT_TRUE(tb.t->add(104));
  EXPECT_EQ(listed(*tb.t), (std::vector<int32_t>{101, 104, 103}));
}

TEST(GroupTable, AFullTableRefusesAndTakesAgainOnceASlotIsFree) {
  Table tb;
  ASSERT_NE(tb.t, nullptr);
  for (int i = 1; i <= GroupTable::kSlots; ++i) ASSERT_TRUE(tb.t->add(i));
  EXPECT_FALSE(tb.t->add(GroupTable::kSlots + 1)) << "the caller falls back to the watchdog's pipe";
  EXPECT_EQ(listed(*tb.t).size(), static_cast<size_t>(GroupTable::kSlots));
  EXPECT_TRUE(tb.t->remove(7));
  EXPECT_TRUE(tb.t->add(GroupTable::kSlots + 1));
  EXPECT_FALSE(tb.t->add(GroupTable::kSlots + 2));
}

// What a forked process adds, the process that made the table sees (as the watchdog sees
// what a worker's child added).
TEST(GroupTable, IsSharedWithAForkedChild) {
  Table tb;
  ASSERT_NE(tb.t, nullptr);
  ASSERT_TRUE(tb.t->add(201));
  pid_t c = fork();
  ASSERT_GE(c, 0);
  if (c == 0) _exit(tb.t->add(202) && tb.t->remove(201) ? 0 : 1);
  int st = 0;
  ASSERT_EQ(waitpid(c, &st, 0), c);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(listed(*tb.t), (std::vector<int32_t>{202}));
}

}  // namespace
}  // namespace hvdrun
