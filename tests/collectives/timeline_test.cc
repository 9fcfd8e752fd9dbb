// A rank's timeline file (collectives/timeline): its name, its creation (never over what is
// there) and its format, one Chrome trace event per line, each line complete as written.
#include "collectives/timeline.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace hvdrun {
namespace {

using nlohmann::json;

struct Dir {
  std::string path = ::testing::TempDir() + "timeline_test_" + std::to_string(getpid());
  Dir() {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Dir() { std::filesystem::remove_all(path); }
};

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The events of a rank file: "[" on the first line, then one event a line, each ending
// with ",": the format Chrome loads with its closing bracket missing.
std::vector<json> events_of(const std::string& p) {
  std::string text = read_file(p);
  std::vector<json> out;
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "[");
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.back(), ',') << line;
    out.push_back(json::parse(line.substr(0, line.size() - 1)));
  }
  EXPECT_EQ(text.back(), '\n');
  return out;
}

TEST(Timeline, EachRankHasItsOwnFile) {
  EXPECT_EQ(Timeline::rank_path("/x/t.json", 3), "/x/t.json.rank3");
}

TEST(Timeline, ARankIsAProcessRowAndEachTensorAThreadGoingThroughItsPhases) {
  Dir d;
  std::string path = d.path + "/t.json";
  auto t = Timeline::open(path, 2, "node\"7", true);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_TRUE((*t)->mark_cycles());
  EXPECT_EQ((*t)->path(), Timeline::rank_path(path, 2));
  (*t)->instant("CYCLE_START");
  (*t)->phase("grad/a", "QUEUE");
  (*t)->phase("grad\\b\n", "NEGOTIATE_ALLREDUCE");
  (*t)->phase("grad/a", "ALLREDUCE");
  (*t)->done("grad/a");
  (*t)->done("grad/a");     // no phase open: nothing
  (*t)->done("never seen");  // nothing either
  // Every line is in the file as soon as it is written (a killed job leaves them all).
  auto ev = events_of(Timeline::rank_path(path, 2));
  ASSERT_EQ(ev.size(), 10u) << read_file(Timeline::rank_path(path, 2));
  EXPECT_EQ(ev[0], json::parse(R"j({"name":"process_name","ph":"M","pid":2,"args":{"name":"rank 2 (node\"7)"}})j"));
  EXPECT_EQ(ev[1], json::parse(R"({"name":"process_sort_index","ph":"M","pid":2,"args":{"sort_index":2}})"));
  EXPECT_EQ(ev[2]["name"], "CYCLE_START");
  EXPECT_EQ(ev[2]["ph"], "i");
  EXPECT_EQ(ev[2]["tid"], 0);
  EXPECT_EQ(ev[3], json::parse(R"({"name":"thread_name","ph":"M","pid":2,"tid":1,"args":{"name":"grad/a"}})"));
  struct Want {
    size_t i;
    const char* name;
    const char* ph;
    int tid;
  } want[] = {{4, "QUEUE", "B", 1},     {6, "NEGOTIATE_ALLREDUCE", "B", 2}, {7, "QUEUE", "E", 1},
              {8, "ALLREDUCE", "B", 1}, {9, "ALLREDUCE", "E", 1}};
  for (const auto& w : want) {
    EXPECT_EQ(ev[w.i]["name"], w.name) << w.i;
    EXPECT_EQ(ev[w.i]["ph"], w.ph) << w.i;
    EXPECT_EQ(ev[w.i]["pid"], 2) << w.i;
    EXPECT_EQ(ev[w.i]["tid"], w.tid) << w.i;
  }
  EXPECT_EQ(ev[5]["args"]["name"], "grad\\b\n");  // escaped in the file, itself once parsed
  long long last = 0;
  for (size_t i = 2; i < ev.size(); ++i) {
    if (ev[i]["ph"] == "M") continue;
    EXPECT_GE(ev[i]["ts"].get<long long>(), last) << i;
    last = ev[i]["ts"].get<long long>();
  }
}

// Created, never opened: a file, a symbolic link (dangling or not) or a FIFO at the path is
// an error naming it, and is left as it was.
TEST(Timeline, WhatIsAtTheRankPathIsNeverOpened) {
  Dir d;
  std::string path = d.path + "/t.json";
  auto first = Timeline::open(path, 0, "h", false);
  ASSERT_TRUE(first.ok());
  auto again = Timeline::open(path, 0, "h", false);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, "rank 0: the timeline file " + path +
                                       ".rank0 exists already (an earlier job's?): hvdrun does not overwrite it; "
                                       "remove it or choose another timeline file");
  std::filesystem::create_symlink(d.path + "/nowhere", Timeline::rank_path(path, 1));
  ASSERT_EQ(mkfifo(Timeline::rank_path(path, 2).c_str(), 0600), 0);
  for (int r : {1, 2}) {
    auto t = Timeline::open(path, r, "h", false);
    ASSERT_FALSE(t.ok()) << r;
    EXPECT_NE(t.error().message.find("exists already"), std::string::npos) << t.error().message;
  }
  EXPECT_FALSE(std::filesystem::exists(d.path + "/nowhere"));  // the link was not followed
  auto no_dir = Timeline::open(d.path + "/missing/t.json", 4, "h", false);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_EQ(no_dir.error().message,
            "rank 4: cannot create the timeline file " + d.path + "/missing/t.json.rank4: No such file or directory");
  struct stat st {};
  ASSERT_EQ(stat(Timeline::rank_path(path, 0).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~static_cast<unsigned>(umask(umask(0))));
}

}  // namespace
}  // namespace hvdrun
