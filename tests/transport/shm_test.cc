// The shared-memory channel (transport/shm): producer and consumer in this process, the
// consumer mapping the producer's memfd through /proc/<pid>/fd as a peer process does.
#include "transport/shm.h"

#include <unistd.h>

#include <filesystem>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace hvdrun::transport {
namespace {

struct Channel {
  ShmChannel producer, consumer;
  explicit Channel(size_t bytes) {
    auto p = ShmChannel::create(bytes);
    EXPECT_TRUE(p.ok()) << p.error().message;
    producer = std::move(*p);
    auto c = ShmChannel::open(getpid(), producer.memfd(), producer.token());
    EXPECT_TRUE(c.ok()) << c.error().message;
    consumer = std::move(*c);
    producer.release_memfd();  // both mapped: the memory lives as long as the mappings
  }
};

std::string pattern(size_t n, size_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((seed + i * 7) % 251);
  return s;
}

TEST(ShmChannel, ARingOfAPowerOfTwoInANamelessSegment) {
  auto p = ShmChannel::create(5000);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->capacity(), 8192u);
  EXPECT_EQ(ShmChannel::create(1)->capacity(), 4096u);  // at least a page
  EXPECT_EQ(p->token().size(), ShmChannel::kTokenBytes);
  std::string target = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(p->memfd()));
  EXPECT_EQ(target.rfind("/memfd:hvdrun-shm", 0), 0u) << target;  // nothing in /dev/shm to leave behind
}

TEST(ShmChannel, TheConsumerChecksTheToken) {
  auto p = ShmChannel::create(4096);
  ASSERT_TRUE(p.ok());
  std::string wrong = p->token();
  wrong[0] = static_cast<char>(wrong[0] ^ 1);
  auto c = ShmChannel::open(getpid(), p->memfd(), wrong);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("is not the segment the peer announced"), std::string::npos) << c.error().message;
  auto not_a_segment = ShmChannel::open(getpid(), 0, p->token());  // stdin
  ASSERT_FALSE(not_a_segment.ok());
  auto gone = ShmChannel::open(getpid(), 9999, p->token());
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message.find("open /proc/"), std::string::npos) << gone.error().message;
}

// A byte stream: what is written comes out in order, across many turns of the ring, in
// pieces of sizes prime to its capacity; a full ring takes nothing, an empty one gives nothing.
TEST(ShmChannel, BytesComeOutInOrderAcrossTheRingsEnd) {
  Channel ch(4096);
  std::string sent = pattern(4096 * 37 + 123, 1), got;
  size_t off = 0;
  char buf[3001];
  while (got.size() < sent.size()) {
    off += ch.producer.write(sent.data() + off, std::min<size_t>(sent.size() - off, 1237));
    size_t n = ch.consumer.read(buf, sizeof buf);
    got.append(buf, n);
    ASSERT_FALSE(n == 0 && off == got.size() && off < sent.size()) << "neither side moved";
  }
  EXPECT_EQ(got, sent);
  EXPECT_EQ(ch.consumer.read(buf, sizeof buf), 0u);
  EXPECT_FALSE(ch.consumer.readable());
  std::string big(5000, 'x');
  EXPECT_EQ(ch.producer.write(big.data(), big.size()), 4096u);  // full
  EXPECT_EQ(ch.producer.write(big.data(), 1), 0u);
  EXPECT_TRUE(ch.consumer.readable());
}

TEST(ShmChannel, PeekAndConsumeInPlace) {
  Channel ch(4096);
  std::string a = pattern(3000, 2), b = pattern(2000, 3);
  ASSERT_EQ(ch.producer.write(a.data(), a.size()), a.size());
  size_t len = 0;
  const char* p = ch.consumer.peek(&len);
  ASSERT_EQ(len, a.size());
  EXPECT_EQ(std::string(p, len), a);
  ch.consumer.consume(len);
  ASSERT_EQ(ch.producer.write(b.data(), b.size()), b.size());  // wraps: 1096 bytes, then 904
  p = ch.consumer.peek(&len);
  ASSERT_EQ(len, 4096u - 3000u);  // contiguous up to the ring's end
  std::string got(p, len);
  ch.consumer.consume(len);
  p = ch.consumer.peek(&len);
  got.append(p, len);
  ch.consumer.consume(len);
  EXPECT_EQ(got, b);
  ch.consumer.peek(&len);
  EXPECT_EQ(len, 0u);  // all taken
}

// Bytes written before a close are delivered; then the consumer sees the close and its reason.
TEST(ShmChannel, ACloseComesAfterTheBytesWrittenBeforeIt) {
  Channel ch(4096);
  ASSERT_EQ(ch.producer.write("last", 4), 4u);
  ch.producer.close("rank 3 failed");
  EXPECT_FALSE(ch.consumer.peer_closed());  // 4 bytes still to read
  char buf[8];
  ASSERT_EQ(ch.consumer.read(buf, sizeof buf), 4u);
  EXPECT_EQ(std::string(buf, 4), "last");
  EXPECT_TRUE(ch.consumer.peer_closed());
  EXPECT_EQ(ch.consumer.peer_reason(), "rank 3 failed");
  Channel other(4096);
  other.consumer.close();
  EXPECT_TRUE(other.producer.peer_closed());
}

// Single copy: a posted block is read straight from the producer's memory, after the ring
// bytes written before it.
TEST(ShmChannel, APostedBlockComesAfterTheRingBytesBeforeIt) {
  Channel ch(4096);
  ch.producer.set_single_copy_min(1024);
  if (!ch.producer.single_copy()) GTEST_SKIP() << "process_vm_readv is refused here";
  EXPECT_FALSE(ch.producer.can_post(1023));
  ASSERT_TRUE(ch.producer.can_post(1 << 20));
  std::string block = pattern(1 << 20, 4);
  ASSERT_EQ(ch.producer.write("head", 4), 4u);
  ch.producer.post(block.data(), block.size());
  EXPECT_FALSE(ch.producer.block_taken());
  EXPECT_EQ(ch.consumer.block_left(), 0u);  // the ring's 4 bytes first
  char head[4];
  ASSERT_EQ(ch.consumer.read(head, 4), 4u);
  ASSERT_EQ(ch.consumer.block_left(), block.size());
  std::string got(block.size(), '\0');
  size_t off = 0;
  while (off < got.size()) {
    ssize_t n = ch.consumer.pull(got.data() + off, std::min<size_t>(got.size() - off, 300000));
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
  EXPECT_EQ(got, block);
  EXPECT_EQ(ch.consumer.block_left(), 0u);
  EXPECT_TRUE(ch.producer.block_taken());
  EXPECT_EQ(ch.producer.refused_at(), SIZE_MAX);
}

}  // namespace
}  // namespace hvdrun::transport
