#include "launcher/timeline_merge.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace hvdrun {
namespace {

TEST(TimelineMerge, RanksMergeIntoOneArrayAndACutLineIsDropped) {
  std::string r0 = "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"rank 0\"}},\n"
                   "{\"name\":\"QUEUE\",\"ph\":\"B\",\"pid\":0,\"tid\":1,\"ts\":5},\n";
  std::string r1 = "[\n{\"name\":\"QUEUE\",\"ph\":\"B\",\"pid\":1,\"tid\":1,\"ts\":6},\n{\"name\":\"QUE";  // killed
  size_t events = 0;
  std::string merged = merge_timelines({r0, "", r1}, &events);
  EXPECT_EQ(events, 3u);
  auto j = nlohmann::json::parse(merged, nullptr, false);
  ASSERT_TRUE(j.is_array()) << merged;
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[2]["pid"], 1);
  EXPECT_EQ(merge_timelines({}, &events), "[\n\n]\n");
  EXPECT_EQ(events, 0u);
}

}  // namespace
}  // namespace hvdrun
