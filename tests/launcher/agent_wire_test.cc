#include "launcher/agent_wire.h"

#include <gtest/gtest.h>

#include "launcher/agent_messages.h"
#include "launcher/launch_command.h"

namespace hvdrun {
namespace {

using agentwire::Frame;
using agentwire::FrameReader;
using agentwire::Type;

TEST(AgentWire, FramesSurviveAnySplitOfTheStream) {
  std::string stream = agentwire::encode(Type::kHello, "{}") + agentwire::encode_output(3, 1, "a\nbc\n") +
                       agentwire::encode(Type::kStart, "") + agentwire::encode_output(-1, 1, "hvdrun: x\n");
  for (size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    FrameReader r;
    std::vector<Frame> frames;
    for (size_t off = 0; off < stream.size(); off += chunk) {
      ASSERT_TRUE(r.feed(stream.substr(off, chunk)).ok());
      while (auto f = r.next()) frames.push_back(*f);
    }
    ASSERT_EQ(frames.size(), 4u) << "chunk " << chunk;
    EXPECT_EQ(frames[0].type, Type::kHello);
    EXPECT_EQ(frames[0].payload, "{}");
    int rank, s;
    std::string_view lines;
    ASSERT_TRUE(agentwire::decode_output(frames[1].payload, &rank, &s, &lines).ok());
    EXPECT_EQ(rank, 3);
    EXPECT_EQ(s, 1);
    EXPECT_EQ(lines, "a\nbc\n");
    EXPECT_EQ(frames[2].type, Type::kStart);
    ASSERT_TRUE(agentwire::decode_output(frames[3].payload, &rank, &s, &lines).ok());
    EXPECT_EQ(rank, -1);
  }
}

TEST(AgentWire, BadFramesAreErrors) {
  FrameReader r;
  EXPECT_FALSE(r.feed(std::string("\xff\xff\xff\xff\x01", 5)).ok());  // oversized
  FrameReader r2;
  EXPECT_FALSE(r2.feed(std::string("\0\0\0\x01\x63", 5)).ok());  // unknown type
  FrameReader r3;
  EXPECT_FALSE(r3.feed(std::string("\0\0\0\0\x01", 5)).ok());  // empty frame
  int rank, s;
  std::string_view lines;
  EXPECT_FALSE(agentwire::decode_output("abc", &rank, &s, &lines).ok());
  EXPECT_FALSE(agentwire::decode_output(std::string("\0\0\0\x01\x07x", 6), &rank, &s, &lines).ok());
}

// Text where a frame should be (a login banner, a .bashrc that echoes, a launcher's
// greeting on stdout) read as "agent frame of 1466264675 bytes": the reader now quotes
// the bytes, up to 80, printably, and says whether any frame came before them.
TEST(AgentWire, TextInsteadOfAFrameIsQuoted) {
  FrameReader r;
  EXPECT_FALSE(r.any_frame());
  auto s = r.feed("Welcome to Ubuntu 22.04 LTS\n");
  ASSERT_FALSE(s.ok());
  EXPECT_FALSE(r.any_frame());
  EXPECT_EQ(r.stuck_at(), "Welcome to Ubuntu 22.04 LTS\\x0a");
  EXPECT_NE(s.error().message.find("at byte 0: 'Welcome to Ubuntu 22.04 LTS\\x0a'"), std::string::npos)
      << s.error().message;
  FrameReader longer;
  ASSERT_FALSE(longer.feed(std::string(100, 'x')).ok());
  EXPECT_EQ(longer.stuck_at(), std::string(80, 'x') + "...");
  // After a whole frame: where the stream broke.
  FrameReader after;
  std::string hello = agentwire::encode(Type::kHello, "{}");
  ASSERT_FALSE(after.feed(hello + "oops, text").ok());
  EXPECT_TRUE(after.any_frame());
  EXPECT_EQ(after.stuck_at(), "oops, text");
  // Shorter than a frame's header, then the end of the stream: finish() says what was left.
  FrameReader brief;
  ASSERT_TRUE(brief.feed("hi\n").ok());
  EXPECT_FALSE(brief.finish().ok());
  EXPECT_EQ(brief.stuck_at(), "hi\\x0a");
  FrameReader whole;
  ASSERT_TRUE(whole.feed(hello).ok());
  EXPECT_TRUE(whole.finish().ok());
}

TEST(LaunchCommand, ShellQuoteAndPolicies) {
  EXPECT_EQ(shell_quote("/usr/bin/hvdrun"), "/usr/bin/hvdrun");
  EXPECT_EQ(shell_quote("/opt/my dir/hvdrun"), "'/opt/my dir/hvdrun'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(*parse_host_key_policy("accept-new"), HostKeyPolicy::kAcceptNew);
  EXPECT_EQ(*parse_host_key_policy("no"), HostKeyPolicy::kNo);
  auto bad = parse_host_key_policy("maybe");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'maybe': expected yes, accept-new or no"), std::string::npos);
}

}  // namespace
}  // namespace hvdrun
