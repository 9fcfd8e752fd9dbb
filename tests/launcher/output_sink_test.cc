// Where workers' output goes (launcher/output_sink): tagged lines on hvdrun's stdout and
// stderr (pipes here), and untagged in DIR/rank.N/{stdout,stderr} with --output-filename.
#include "launcher/output_sink.h"
#include "pipe_pair.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <sstream>
#include <string>

namespace hvdrun {
namespace {

struct Dir {
  std::string path = ::testing::TempDir() + "output_sink_test_" + std::to_string(getpid());
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

TEST(OutputTag, Prefix) {
  EXPECT_EQ(tag_line_prefix(3, StreamKind::kStdout, false), "[3]<stdout>:");
  EXPECT_EQ(tag_line_prefix(12, StreamKind::kStderr, false), "[12]<stderr>:");
  std::string ts = tag_line_prefix(0, StreamKind::kStdout, true);
  EXPECT_EQ(ts.size(), std::string("2026-12-02 12:00:00.000 [0]<stdout>:").size()) << ts;
}

// Each line tagged on hvdrun's stream, each rank's lines as they came in its files (named
// with the job's rank width), and hvdrun's own notices on stderr after what came before.
TEST(TaggedOutput, TagsEachLineAndWritesEachRanksFiles) {
  Pipe out, err;
  Dir d;
  TaggedOutputOptions o;
  o.size = 12;
  o.output_dir = d.path;
  o.stdout_fd = out.wr;
  o.stderr_fd = err.wr;
  auto sink = TaggedOutput::create(o, {3, 11});
  ASSERT_TRUE(sink.ok()) << sink.error().message;
  (*sink)->write_lines(3, StreamKind::kStdout, "one\n50%\r100%\n");  // \r ends a line too
  (*sink)->write_lines(11, StreamKind::kStderr, "oops\n");
  (*sink)->write_lines(3, StreamKind::kStdout, "");
  (*sink)->notice("hvdrun: rank 11 exited with code 7");
  (*sink)->drain();
  EXPECT_EQ(out.take(), "[3]<stdout>:one\n[3]<stdout>:50%\r[3]<stdout>:100%\n");
  EXPECT_EQ(err.take(), "[11]<stderr>:oops\nhvdrun: rank 11 exited with code 7\n");
  EXPECT_EQ(read_file(d.path + "/rank.03/stdout"), "one\n50%\r100%\n");
  EXPECT_EQ(read_file(d.path + "/rank.03/stderr"), "");
  EXPECT_EQ(read_file(d.path + "/rank.11/stderr"), "oops\n");
  EXPECT_FALSE((*sink)->congested());
}

TEST(TaggedOutput, AnOutputDirThatCannotBeMadeIsAUsageError) {
  Dir d;
  std::ofstream(d.path + "/file") << "x";
  TaggedOutputOptions o;
  o.output_dir = d.path + "/file";
  auto sink = TaggedOutput::create(o, {0});
  ASSERT_FALSE(sink.ok());
  EXPECT_EQ(sink.error().kind, ErrorKind::kUsage);
  EXPECT_EQ(sink.error().message.rfind("--output-filename '" + d.path + "/file': cannot create " + d.path +
                                           "/file/rank.0: ",
                                       0),
            0u)
      << sink.error().message;
}

// A full disk does not pass silently: one report naming the file, then the files are
// given up (hvdrun's own streams go on).
TEST(TaggedOutput, AFailedFileWriteIsReportedOnce) {
  Pipe out, err;
  Dir d;
  std::filesystem::create_directories(d.path + "/rank.0");
  std::filesystem::create_symlink("/dev/full", d.path + "/rank.0/stdout");
  TaggedOutputOptions o;
  o.output_dir = d.path;
  o.stdout_fd = out.wr;
  o.stderr_fd = err.wr;
  auto sink = TaggedOutput::create(o, {0});
  ASSERT_TRUE(sink.ok()) << sink.error().message;
  int reports = 0;
  std::string message;
  (*sink)->on_file_failure([&](std::string m) {
    ++reports;
    message = std::move(m);
  });
  (*sink)->write_lines(0, StreamKind::kStdout, "a\n");
  (*sink)->write_lines(0, StreamKind::kStdout, "b\n");
  (*sink)->drain();
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(message, "hvdrun: --output-filename: cannot write " + d.path +
                         "/rank.0/stdout: No space left on device; the job's output is incomplete");
  EXPECT_EQ(out.take(), "[0]<stdout>:a\n[0]<stdout>:b\n");
  (*sink)->on_file_failure(nullptr);
}

// `hvdrun ... | head -1`: hvdrun's stdout loses its reader; the sink says so.
TEST(TaggedOutput, AReaderGoneIsReported) {
  signal(SIGPIPE, SIG_IGN);  // as in hvdrun
  Pipe out, err;
  close(out.rd);
  out.rd = -1;
  TaggedOutputOptions o;
  o.stdout_fd = out.wr;
  o.stderr_fd = err.wr;
  auto sink = TaggedOutput::create(o, {0});
  ASSERT_TRUE(sink.ok());
  std::promise<void> gone;
  (*sink)->on_reader_gone([&] { gone.set_value(); });
  (*sink)->write_lines(0, StreamKind::kStdout, "line\n");
  EXPECT_EQ(gone.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  (*sink)->drain();
  (*sink)->on_reader_gone(nullptr);
}

// Output nobody reads piles up to the high-water mark (64 MiB): then the agent is told to
// stop reading the workers.
TEST(TaggedOutput, CongestedAboveTheHighWaterMark) {
  Pipe out, err;
  TaggedOutputOptions o;
  o.stdout_fd = out.wr;
  o.stderr_fd = err.wr;
  auto sink = TaggedOutput::create(o, {0});
  ASSERT_TRUE(sink.ok());
  std::string line(1 << 20, 'x');
  line.back() = '\n';
  for (int i = 0; i < 63; ++i) (*sink)->write_lines(0, StreamKind::kStdout, line);
  EXPECT_FALSE((*sink)->congested());  // 63 MiB and tags: at most that is waiting
  for (int i = 0; i < 2; ++i) (*sink)->write_lines(0, StreamKind::kStdout, line);
  EXPECT_TRUE((*sink)->congested());  // 65 MiB, of which a pipe holds 64 KiB
  signal(SIGPIPE, SIG_IGN);  // as in hvdrun
  close(out.rd);  // unblock the writer: its write fails (EPIPE) and the rest is dropped
  out.rd = -1;
}

}  // namespace
}  // namespace hvdrun
