#include "launcher/timeline_merge.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>

namespace hvdrun {
namespace {

namespace fs = std::filesystem;

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

// A directory of its own for each test, removed at the end.
struct Dir {
  std::string path;
  Dir() {
    std::string templ = ::testing::TempDir() + "timeline_merge_XXXXXX";
    path = ::mkdtemp(templ.data()) ? templ : "";
  }
  ~Dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string rank_text(int r, int events) {
  std::string s = "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
                  ",\"args\":{\"name\":\"rank " + std::to_string(r) + " (h)\"}},\n";
  for (int i = 0; i < events; ++i)
    s += "{\"name\":\"QUEUE\",\"ph\":\"B\",\"pid\":" + std::to_string(r) + ",\"tid\":1,\"ts\":" + std::to_string(i) +
         "},\n";
  return s;
}

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
std::string get(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs the merge with a deadline: a merge blocked in open() (a FIFO) is released by opening
// the FIFO's other end, and fails the test.
Status merge_within(const std::string& file, int ranks, const std::string& fifo = "") {
  auto f = std::async(std::launch::async, [&] { return merge_timeline_files(file, ranks, [] { return 0; }); });
  if (f.wait_for(std::chrono::seconds(20)) == std::future_status::timeout) {
    ADD_FAILURE() << "the merge blocked";
    if (!fifo.empty()) ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));
  }
  return f.get();
}

// Issue 30.2/30.3: only the ranks' own files are merged and removed. A symbolic link (to a
// file of the user's, to /dev/zero), a FIFO, a file that is not a rank's timeline: each is
// named, neither read nor removed, and the job's status says the timeline is incomplete.
TEST(TimelineMerge, OnlyTheRanksOwnFilesAreReadAndRemoved) {
  Dir d;
  std::string file = d / "t.json";
  put(d / "victim", rank_text(1, 2));  // looks like rank 1's: still not read through the link
  put(file + ".rank0", rank_text(0, 3));
  fs::create_symlink(d / "victim", file + ".rank1");
  ASSERT_EQ(::mkfifo((file + ".rank2").c_str(), 0600), 0);
  put(file + ".rank3", "my notes\n");
  fs::create_symlink("/dev/zero", file + ".rank4");
  auto st = merge_within(file, 5, file + ".rank2");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, ErrorKind::kOutputFailed);
  const std::string& m = st.error().message;
  EXPECT_NE(m.find("the timeline " + file + " is incomplete"), std::string::npos) << m;
  EXPECT_NE(m.find(file + ".rank1 is a symbolic link"), std::string::npos) << m;
  EXPECT_NE(m.find(file + ".rank2 is a FIFO"), std::string::npos) << m;
  EXPECT_NE(m.find(file + ".rank3 is not a timeline of rank 3"), std::string::npos) << m;
  EXPECT_NE(m.find(file + ".rank4 is a symbolic link"), std::string::npos) << m;
  auto j = nlohmann::json::parse(get(file), nullptr, false);
  ASSERT_TRUE(j.is_array()) << get(file);
  EXPECT_EQ(j.size(), 4u);
  for (auto& e : j) EXPECT_EQ(e["pid"], 0);
  EXPECT_EQ(get(d / "victim"), rank_text(1, 2));
  EXPECT_EQ(get(file + ".rank3"), "my notes\n");
  EXPECT_EQ(d.names(), (std::vector<std::string>{"t.json", "t.json.rank1", "t.json.rank2", "t.json.rank3",
                                                 "t.json.rank4", "victim"}));
}

// Issue 30.2: with no rank's timeline at all, FILE and a FILE.rank0 of the user's stay as
// they were (both were replaced or deleted).
TEST(TimelineMerge, NoRankTimelineLeavesTheUsersFilesAlone) {
  Dir d;
  std::string file = d / "notes";
  put(file, "my notes\n");
  put(file + ".rank0", "more notes\n");
  auto st = merge_within(file, 2);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, ErrorKind::kOutputFailed);
  EXPECT_NE(st.error().message.find("the timeline " + file + " was not written: " + file +
                                    ".rank0 is not a timeline of rank 0 (left as it is)"),
            std::string::npos)
      << st.error().message;
  EXPECT_EQ(get(file), "my notes\n");
  EXPECT_EQ(get(file + ".rank0"), "more notes\n");
  EXPECT_EQ(d.names(), (std::vector<std::string>{"notes", "notes.rank0"}));
  // And no rank file at all: nothing to say, nothing touched.
  fs::remove(file + ".rank0");
  EXPECT_TRUE(merge_within(file, 2));
  EXPECT_EQ(get(file), "my notes\n");
}

// Issue 30.2: the merge writes through a temporary of its own (mkstemp), never through a
// link planted at FILE.tmp; FILE becomes a regular file.
TEST(TimelineMerge, APlantedTemporaryIsNotFollowed) {
  Dir d;
  std::string file = d / "t.json";
  put(d / "victim", "precious\n");
  fs::create_symlink(d / "victim", file + ".tmp");
  put(file + ".rank0", rank_text(0, 1));
  ASSERT_TRUE(merge_within(file, 1));
  EXPECT_EQ(get(d / "victim"), "precious\n");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(file)));
  EXPECT_EQ(nlohmann::json::parse(get(file), nullptr, false).size(), 2u);
  EXPECT_EQ(d.names(), (std::vector<std::string>{"t.json", "t.json.tmp", "victim"}));
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask) << "what a new file gets, not mkstemp's 0600";
}

// Issue 30.3: hvdrun's signals are blocked (its event loop takes them); during the merge a
// SIGTERM is honoured: the merge stops, FILE is not written, no temporary is left, the
// ranks' files stay, and the status is 128+15.
TEST(TimelineMerge, APendingSignalStopsTheMerge) {
  Dir d;
  std::string file = d / "t.json";
  put(file + ".rank0", rank_text(0, 2));
  put(file + ".rank1", rank_text(1, 2));
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  ::raise(SIGTERM);  // (pending on this thread: no other thread of the test may take it)
  auto st = merge_timeline_files(file, 2);
  timespec zero{0, 0};
  ::sigtimedwait(&term, nullptr, &zero);  // (not taken by the merge: taken here)
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, ErrorKind::kInterrupted);
  EXPECT_EQ(st.error().exit_code, 128 + SIGTERM);
  EXPECT_NE(st.error().message.find("received SIGTERM while merging the timeline: " + file + " not written"),
            std::string::npos)
      << st.error().message;
  EXPECT_EQ(d.names(), (std::vector<std::string>{"t.json.rank0", "t.json.rank1"}));
}

// Issue 30.2/30.4: before the job, a path that is not a regular file, a directory that does
// not exist, or any FILE.rank<N> already there is a usage error naming it.
TEST(TimelineMerge, ThePathIsCheckedBeforeTheJob) {
  Dir d;
  EXPECT_TRUE(check_timeline_path(d / "new.json", 4, "--timeline-filename"));
  put(d / "old.json", "an earlier trace\n");
  EXPECT_TRUE(check_timeline_path(d / "old.json", 4, "--timeline-filename"));  // replaced, as Horovod's
  auto refused = [&](const std::string& file, const std::string& why) {
    auto st = check_timeline_path(file, 4, "--timeline-filename");
    ASSERT_FALSE(st) << file;
    EXPECT_EQ(st.error().kind, ErrorKind::kUsage);
    EXPECT_NE(st.error().message.find("--timeline-filename '" + file + "': " + why), std::string::npos)
        << st.error().message;
  };
  fs::create_directories(d / "dir");
  refused(d / "dir", "is a directory");
  fs::create_symlink(d / "old.json", d / "link.json");
  refused(d / "link.json", "is a symbolic link");
  refused(d / "nodir/t.json", "its directory " + d / "nodir" + ": No such file or directory");
  put(d / "old.json.rank3", "");
  refused(d / "old.json", d / "old.json.rank3 exists already");
  ASSERT_EQ(::mkfifo((d / "new.json.rank0").c_str(), 0600), 0);
  refused(d / "new.json", d / "new.json.rank0 is a FIFO");
}

}  // namespace
}  // namespace hvdrun
