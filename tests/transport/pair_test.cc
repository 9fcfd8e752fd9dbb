// Authenticated data-plane pairs over real TCP sockets.
#include "transport/pair.h"

#include <dirent.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <cstring>
#include <set>
#include <thread>
#include <utility>
#include <gtest/gtest.h>

#include "common/auth.h"
#include "transport/socket_util.h"
#include "blocked_in.h"

namespace hvdrun::transport {
namespace {

PairOptions opts(const std::string& secret, int self) {
  PairOptions o;
  o.secret = secret;
  o.self_rank = self;
  o.deadline = Clock::now() + std::chrono::seconds(10);
  return o;
}

}  // namespace

TEST(Pair, StrangersAndOtherJobsAreRefusedTheRightPeerIsAccepted) {
  std::string secret = auth::new_secret();
  auto l = listen_tcp("127.0.0.1", "127.0.0.1");
  ASSERT_TRUE(l.ok());
  PeerAddress me{1, "h1", "127.0.0.1", l->port};
  PeerAddress left{0, "h0", "127.0.0.1", 0};
  auto accepted = std::async(std::launch::async, [&] { return accept_pair(l->fd.get(), left, opts(secret, 1)); });
  // Another job's rank 0 (another secret): its handshake fails on its side and ours.
  auto other = connect_pair(me, opts(auth::new_secret(), 0));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("failed authentication"), std::string::npos) << other.error().message;
  // This job's rank 2 claiming to be our left neighbour is not rank 0: refused.
  auto wrong_rank = connect_pair(me, [&] {
    auto o = opts(secret, 2);
    o.deadline = Clock::now() + std::chrono::milliseconds(500);
    return o;
  }());
  EXPECT_FALSE(wrong_rank.ok());
  // The real left neighbour gets through, and bytes flow.
  auto good = connect_pair(me, opts(secret, 0));
  ASSERT_TRUE(good.ok()) << good.error().message;
  auto in = accepted.get();
  ASSERT_TRUE(in.ok()) << in.error().message;
  EXPECT_EQ(in->peer().rank, 0);
  std::string msg(1 << 20, 'x'), got(1 << 20, '\0');
  TransferSpec spec;
  spec.send = msg.data();
  spec.send_len = msg.size();
  spec.recv = got.data();
  spec.recv_len = got.size();
  ASSERT_TRUE(transfer(&*good, &*in, spec, 10, 50).ok());
  EXPECT_EQ(got, msg);
}

TEST(Pair, ClosedPeerIsNamed) {
  std::string secret = auth::new_secret();
  auto l = listen_tcp("127.0.0.1", "127.0.0.1");
  ASSERT_TRUE(l.ok());
  PeerAddress me{1, "h1", "127.0.0.1", l->port};
  auto accepted = std::async(std::launch::async,
                             [&] { return accept_pair(l->fd.get(), {0, "node-a", "127.0.0.1", 0}, opts(secret, 1)); });
  auto out = connect_pair(me, opts(secret, 0));
  ASSERT_TRUE(out.ok());
  auto in = accepted.get();
  ASSERT_TRUE(in.ok());
  out->close();
  char buf[16];
  TransferSpec spec;
  spec.recv = buf;
  spec.recv_len = sizeof buf;
  Pair unused;
  auto s = transfer(&unused, &*in, spec, 10, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "connection to rank 0 (host node-a) closed (the peer exited or failed)");
  // The peer lost, as a value: the rank reports it, and hvdrun blames that peer if it left.
  EXPECT_EQ(s.error().kind, ErrorKind::kPeerLost);
  EXPECT_EQ(s.error().peer_rank, 0);
}

namespace {

struct Linked {
  Result<Pair> out = Error{""}, in = Error{""};
};

// Rank 0 (host host0) connects to rank 1 (host host1) through a real listener.
Linked link(const std::string& host0, const std::string& host1, size_t ring_bytes, bool accept_shm = true,
            size_t single_copy = 0) {
  std::string secret = auth::new_secret();
  auto l = listen_tcp("127.0.0.1", "127.0.0.1");
  EXPECT_TRUE(l.ok());
  auto o0 = opts(secret, 0), o1 = opts(secret, 1);
  o0.self_host = host0;
  o0.shm_ring_bytes = ring_bytes;
  o0.shm_single_copy_bytes = single_copy;
  o1.self_host = host1;
  o1.shm_accept = accept_shm;
  Linked k;
  auto accepted = std::async(std::launch::async, [&] { return accept_pair(l->fd.get(), {0, host0, "127.0.0.1", 0}, o1); });
  k.out = connect_pair({1, host1, "127.0.0.1", l->port}, o0);
  k.in = accepted.get();
  return k;
}

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// Forks a child that connects as rank 0 of host h over shared memory, runs `then` on its
// pair (posts a block, or nothing), and stays silent until killed; we accept as rank 1.
struct LocalPeer {
  pid_t pid = -1;
  Result<Pair> in = Error{"not accepted"};
  LocalPeer() = default;
  LocalPeer(LocalPeer&& o) noexcept : pid(std::exchange(o.pid, -1)), in(std::move(o.in)) {}
  ~LocalPeer() { reap(); }
  void reap() {  // kills it (if it still runs) and waits for it: no test leaves it behind
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
};
LocalPeer fork_local_peer(size_t single_copy, const std::function<bool(Pair&)>& then) {
  std::string secret = auth::new_secret();
  auto l = listen_tcp("127.0.0.1", "127.0.0.1");
  EXPECT_TRUE(l.ok());
  LocalPeer p;
  if (!l.ok()) return p;
  int port = l->port;
  p.pid = fork();
  EXPECT_GE(p.pid, 0);
  if (p.pid == 0) {
    auto o = opts(secret, 0);
    o.self_host = "h";
    o.shm_ring_bytes = 1 << 16;
    o.shm_single_copy_bytes = single_copy;
    auto out = connect_pair({1, "h", "127.0.0.1", port}, o);
    if (!out.ok() || !out->is_shm() || !then(*out)) _exit(3);
    pause();
    _exit(0);
  }
  auto o = opts(secret, 1);
  o.self_host = "h";
  p.in = accept_pair(l->fd.get(), {0, "h", "127.0.0.1", 0}, o);
  return p;
}

}  // namespace

// A peer that closes with data unread sends a reset, not an end of stream: it is named as
// lost all the same.
TEST(Pair, PeerResetIsNamedAsLost) {
  Linked k = link("node-a", "h1", 0);  // two hosts: TCP
  ASSERT_TRUE(k.out.ok());
  ASSERT_TRUE(k.in.ok());
  std::string unread(4096, 'x');
  TransferSpec send;
  send.send = unread.data();
  send.send_len = unread.size();
  Pair unused;
  ASSERT_TRUE(transfer(&*k.in, &unused, send, 10, 0).ok());
  // Closed once the bytes are in out's receive queue (then the close is a reset).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int queued = 0;
  while ((ioctl(k.out->fd(), FIONREAD, &queued) != 0 || queued < static_cast<int>(unread.size())) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(queued, static_cast<int>(unread.size()));
  k.out->close();
  char buf[16];
  TransferSpec spec;
  spec.recv = buf;
  spec.recv_len = sizeof buf;
  auto s = transfer(&unused, &*k.in, spec, 10, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "connection to rank 0 (host node-a) lost: Connection reset by peer");
  EXPECT_EQ(s.error().kind, ErrorKind::kPeerLost);
  EXPECT_EQ(s.error().peer_rank, 0);
}


TEST(ShmPair, SameHostGetsSharedMemoryOtherHostsAndRefusersStayOnTcp) {
  auto before = dev_shm();
  {
    auto same = link("node-a", "node-a", 1 << 16);
    ASSERT_TRUE(same.out.ok() && same.in.ok());
    EXPECT_TRUE(same.out->is_shm());
    EXPECT_TRUE(same.in->is_shm());
    EXPECT_EQ(dev_shm(), before);  // memfd: nothing named
    auto other = link("node-a", "node-b", 1 << 16);
    ASSERT_TRUE(other.out.ok() && other.in.ok());
    EXPECT_FALSE(other.out->is_shm());
    EXPECT_FALSE(other.in->is_shm());
    auto refused = link("node-a", "node-a", 1 << 16, /*accept_shm=*/false);
    ASSERT_TRUE(refused.out.ok() && refused.in.ok());
    EXPECT_FALSE(refused.out->is_shm());
    EXPECT_FALSE(refused.in->is_shm());
    auto off = link("node-a", "node-a", 0);
    ASSERT_TRUE(off.out.ok() && off.in.ok());
    EXPECT_FALSE(off.in->is_shm());
  }
  EXPECT_EQ(dev_shm(), before);
}

// The engine's background thread watches a ring it does not read (ShmChannel::prepare_watch),
// while the thread that reads may wait on the same futex word: one write wakes both.
TEST(ShmPair, OneWriteWakesTheWatcherAndTheReaderWaitingBesideIt) {
  auto k = link("h", "h", 4096);
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  ASSERT_TRUE(k.out->is_shm());
  ShmChannel* in = k.in->shm();
  // A thread that waits on `w` unless `ready`; *tid: its thread id, once it runs.
  auto asleep = [](ShmChannel::Wait w, auto ready, std::atomic<pid_t>* tid) {
    return std::async(std::launch::async, [w, ready, tid] {
      tid->store(test_threads::this_thread_id());
      auto t0 = std::chrono::steady_clock::now();
      if (!ready()) futex_wait_any(&w, 1, 10'000'000'000L);  // 10 s: a missed wake shows
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  };
  char got[8];
  // Alone: the reader is not waiting, so only the watcher's own flag gets it woken.
  // Each write comes once the waiters are asleep on the futex.
  std::atomic<pid_t> watcher_tid{0}, reader_tid{0};
  auto asleep_now = [](const std::atomic<pid_t>& tid) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (tid.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return tid.load() != 0 && test_threads::wait_blocked_in(getpid(), tid.load());
  };
  auto watcher = asleep(in->prepare_watch(), [in] { return in->has_data(); }, &watcher_tid);
  ASSERT_TRUE(asleep_now(watcher_tid));
  ASSERT_EQ(k.out->shm()->write("12345678", 8), 8u);
  ASSERT_EQ(watcher.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "the lone watcher was not woken";
  EXPECT_LT(watcher.get(), 5.0);
  in->end_watch();
  EXPECT_TRUE(in->has_data());
  ASSERT_EQ(in->read(got, 8), 8u);
  EXPECT_FALSE(in->has_data());
  // Beside the reader's own wait on the same word: one write wakes both.
  watcher_tid = 0;
  watcher = asleep(in->prepare_watch(), [in] { return in->has_data(); }, &watcher_tid);
  auto reader = asleep(in->prepare_read_wait(), [in] { return in->readable(); }, &reader_tid);
  ASSERT_TRUE(asleep_now(watcher_tid));
  ASSERT_TRUE(asleep_now(reader_tid));
  ASSERT_EQ(k.out->shm()->write("abcdefgh", 8), 8u);
  ASSERT_EQ(watcher.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "the watcher was not woken";
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "the reader was not woken";
  EXPECT_LT(watcher.get(), 5.0);
  EXPECT_LT(reader.get(), 5.0);
  in->end_watch();
  in->end_read_wait();
  ASSERT_EQ(in->read(got, 8), 8u);
  EXPECT_EQ(std::string(got, 8), "abcdefgh");
}

TEST(ShmPair, StreamsThroughASmallRingIntoAReduceWindow) {
  auto k = link("h", "h", 4096);  // the smallest ring: every transfer wraps many times
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  ASSERT_TRUE(k.out->is_shm());
  std::string msg(3 << 20, '\0'), got(msg.size(), '\0');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(i * 131 + i / 4099);
  Pair none;
  auto sender = std::async(std::launch::async, [&] {
    TransferSpec spec;
    spec.send = msg.data();
    spec.send_len = msg.size();
    return transfer(&*k.out, &none, spec, 10, 0);  // spin 0: every wait goes to the futex
  });
  // The receiver takes the stream through a 64 KiB window, as the reduce-scatter does.
  std::string window(1 << 16, '\0');
  TransferSpec spec;
  spec.recv = window.data();
  spec.recv_len = msg.size();
  spec.recv_window = window.size();
  spec.notify_bytes = window.size();
  spec.on_recv = [&](size_t off, size_t len) { std::memcpy(got.data() + off, window.data() + off % window.size(), len); };
  auto r = transfer(&none, &*k.in, spec, 10, 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(sender.get().ok());
  EXPECT_TRUE(got == msg);
}

// In-place delivery (the reduce-scatter's): whole 8-byte units, in order, including units
// split by the ring's end (the stream starts 3 bytes off so that some are).
TEST(ShmPair, InPlaceDeliveryHandsOverWholeUnitsAcrossTheRingsEnd) {
  auto k = link("h", "h", 4096);
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  Pair none;
  std::string msg(3 + (1 << 20), '\0'), got(msg.size(), '\0');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(i * 7 + i / 1021);
  auto sender = std::async(std::launch::async, [&] {
    TransferSpec spec;
    spec.send = msg.data();
    spec.send_len = msg.size();
    return transfer(&*k.out, &none, spec, 10, 0);
  });
  TransferSpec head;
  head.recv = got.data();
  head.recv_len = 3;
  ASSERT_TRUE(transfer(&none, &*k.in, head, 10, 0).ok());
  std::string window(4096, '\0');
  size_t expect_off = 0, bad_units = 0;
  TransferSpec spec;
  spec.recv = window.data();
  spec.recv_len = msg.size() - 3;
  spec.recv_window = window.size();
  spec.notify_bytes = window.size();
  spec.on_recv = [&](size_t, size_t) { ADD_FAILURE() << "the window was used"; };
  spec.direct_unit = 8;
  spec.on_recv_direct = [&](size_t off, const char* data, size_t len) {
    if (off != expect_off || len % 8) ++bad_units;
    std::memcpy(got.data() + 3 + off, data, len);
    expect_off = off + len;
  };
  auto r = transfer(&none, &*k.in, spec, 10, 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(sender.get().ok());
  EXPECT_EQ(bad_units, 0u);
  EXPECT_TRUE(got == msg);
}

TEST(ShmPair, BytesSentBeforeACloseArriveThenTheCloseIsNamed) {
  auto k = link("h", "h", 1 << 16);
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  char data[1000];
  std::memset(data, 7, sizeof data);
  TransferSpec send;
  send.send = data;
  send.send_len = sizeof data;
  Pair none;
  ASSERT_TRUE(transfer(&*k.out, &none, send, 10, 0).ok());
  k.out->close();
  char got[1000] = {};
  TransferSpec recv;
  recv.recv = got;
  recv.recv_len = sizeof got;
  ASSERT_TRUE(transfer(&none, &*k.in, recv, 10, 0).ok());
  EXPECT_EQ(std::memcmp(got, data, sizeof got), 0);
  recv.recv_len = 1;
  auto s = transfer(&none, &*k.in, recv, 10, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "connection to rank 0 (host h) closed (the peer exited or failed)");
}

// Single copy: a message of at least the threshold is posted, and the receiver copies it
// out of the sender's memory; bytes that went through the ring before it arrive first, and
// in-place delivery still gets whole units when one is split between the ring and a block.
TEST(ShmPair, LargeMessagesGoBySingleCopyInStreamOrder) {
  auto k = link("h", "h", 4096, true, /*single_copy=*/8192);
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  ShmChannel* out = k.out->shm();
  ASSERT_NE(out, nullptr);
  EXPECT_FALSE(out->can_post(8191));
  ASSERT_TRUE(out->can_post(8192)) << "the consumer could not read our memory";
  Pair none;
  std::string head(3, 'h'), msg(5 << 20, '\0'), got(head.size() + msg.size(), '\0');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(i * 131 + i / 4099);
  // 3 bytes through the ring, then the block: the receiver's 8-byte units straddle them.
  ASSERT_TRUE(transfer(&*k.out, &none, [&] { TransferSpec t; t.send = head.data(); t.send_len = 3; return t; }(), 10, 0).ok());
  auto sender = std::async(std::launch::async, [&] {
    TransferSpec spec;
    spec.send = msg.data();
    spec.send_len = msg.size();
    return transfer(&*k.out, &none, spec, 10, 0);  // returns once the receiver has it all
  });
  size_t bad_units = 0, expect_off = 0;
  std::string window(4096, '\0');
  TransferSpec spec;
  spec.recv = window.data();
  spec.recv_len = got.size() - 11;  // whole units; the last 11 bytes below, as plain bytes
  spec.recv_window = window.size();
  spec.notify_bytes = 1 << 16;
  spec.direct_unit = 8;
  spec.on_recv_direct = [&](size_t off, const char* data, size_t len) {
    if (off != expect_off || len % 8) ++bad_units;
    std::memcpy(got.data() + off, data, len);
    expect_off = off + len;
  };
  auto r = transfer(&none, &*k.in, spec, 10, 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  TransferSpec rest;
  rest.recv = got.data() + got.size() - 11;
  rest.recv_len = 11;
  ASSERT_TRUE(transfer(&none, &*k.in, rest, 10, 0).ok());
  ASSERT_EQ(sender.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto sent = sender.get();
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  EXPECT_EQ(bad_units, 0u);
  EXPECT_TRUE(got == head + msg);
  EXPECT_FALSE(k.in->shm()->has_data());
}

// A block still posted when its sender closes is not delivered (its memory may be gone):
// the receiver names the closed peer instead.
TEST(ShmPair, BlockPostedBeforeACloseIsNotDelivered) {
  auto k = link("h", "h", 4096, true, 4096);
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  ASSERT_TRUE(k.out->shm()->can_post(1 << 16));
  std::string msg(1 << 16, 'x');
  EXPECT_FALSE(k.in->shm()->has_data());
  k.out->shm()->post(msg.data(), msg.size());
  EXPECT_TRUE(k.in->shm()->has_data());  // the engine's watcher sees a posted block
  EXPECT_EQ(k.in->shm()->block_left(), msg.size());
  k.out->close();
  std::string got(msg.size(), '\0');
  TransferSpec recv;
  recv.recv = got.data();
  recv.recv_len = got.size();
  Pair none;
  auto s = transfer(&none, &*k.in, recv, 10, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "connection to rank 0 (host h) closed (the peer exited or failed)");
  EXPECT_EQ(s.error().kind, ErrorKind::kPeerLost);
}

// A local peer killed outright (SIGKILL: it closes nothing itself) is noticed within the
// futex wait's slice, through the TCP connection kept beside the ring, and named.
TEST(ShmPair, KilledLocalPeerIsNoticedFastAndNamed) {
  auto peer = fork_local_peer(0, [](Pair&) { return true; });  // connected and silent
  pid_t child = peer.pid;
  auto& in = peer.in;
  ASSERT_TRUE(in.ok()) << in.error().message;
  ASSERT_TRUE(in->is_shm());
  // Killed once this thread waits in the transfer (on the ring's futex).
  const pid_t waiter = test_threads::this_thread_id();
  auto killer = std::async(std::launch::async, [&] {
    EXPECT_TRUE(test_threads::wait_blocked_in(getpid(), waiter)) << "the transfer never waited";
    kill(child, SIGKILL);
  });
  char buf[64];
  TransferSpec spec;
  spec.recv = buf;
  spec.recv_len = sizeof buf;
  Pair none;
  // The time-out is far beyond the test's deadline: only the liveness check can end it.
  auto s = transfer(&none, &*in, spec, 600, 50);
  killer.get();
  peer.reap();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kPeerLost);
  EXPECT_EQ(s.error().message, "connection to rank 0 (host h) closed (the peer exited or failed)");
}

// A sender killed with a block posted: its memory is gone, and the receiver names it.
TEST(ShmPair, KilledSenderOfAPostedBlockIsNamed) {
  auto peer = fork_local_peer(4096, [](Pair& out) {
    static char block[1 << 20];
    if (!out.shm()->can_post(sizeof block)) return false;
    out.shm()->post(block, sizeof block);
    return true;
  });
  auto& in = peer.in;
  ASSERT_TRUE(in.ok()) << in.error().message;
  ASSERT_TRUE(in->is_shm());
  auto t0 = Clock::now();
  while (in->shm()->block_left() == 0 && Clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(in->shm()->block_left(), size_t{1} << 20);
  peer.reap();
  std::string buf(1 << 20, '\0');
  TransferSpec spec;
  spec.recv = buf.data();
  spec.recv_len = buf.size();
  Pair none;
  auto s = transfer(&none, &*in, spec, 30, 50);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "connection to rank 0 (host h) closed (the peer exited or failed)");
  EXPECT_EQ(s.error().kind, ErrorKind::kPeerLost);
}

// A sender whose block the receiver is copying, slowly but steadily, is not waiting on a
// silent peer: it must not time out (over the ring, freed space is its progress).
TEST(ShmPair, PostedSenderToASlowReaderDoesNotTimeOut) {
  auto k = link("h", "h", 1 << 16, true, 4096);
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  ASSERT_TRUE(k.out->shm()->can_post(16 << 20));
  std::string msg(16 << 20, 'm'), got(msg.size(), '\0');
  Pair none;
  auto sender = std::async(std::launch::async, [&] {
    TransferSpec spec;
    spec.send = msg.data();
    spec.send_len = msg.size();
    return transfer(&*k.out, &none, spec, 0.25, 0);  // 0.25 s without progress fails
  });
  TransferSpec spec;
  spec.recv = got.data();
  spec.recv_len = got.size();
  spec.notify_bytes = 256 << 10;
  spec.direct_unit = 4;
  spec.on_recv_direct = [&](size_t off, const char* data, size_t len) {
    std::memcpy(got.data() + off, data, len);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // 640 ms in all
  };
  auto r = transfer(&none, &*k.in, spec, 30, 0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto sent = sender.get();
  EXPECT_TRUE(sent.ok()) << sent.error().message;
  EXPECT_TRUE(got == msg);
}

// Memory the sender reads but the kernel will not copy to another process (memfd_secret;
// device mappings are alike): the block is refused, its rest comes through the ring, and
// single copy stops on that channel. Nothing fails.
TEST(ShmPair, MemoryTheKernelWillNotCopyGoesThroughTheRing) {
  int fd = static_cast<int>(syscall(447 /* memfd_secret */, 0));
  if (fd < 0) GTEST_SKIP() << "this kernel has no memfd_secret";
  const size_t len = 1 << 20;
  ASSERT_EQ(ftruncate(fd, len), 0);
  char* p = static_cast<char*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  for (size_t i = 0; i < len; ++i) p[i] = static_cast<char>(i * 7 + i / 999);
  auto k = link("h", "h", 1 << 16, true, 4096);
  ASSERT_TRUE(k.out.ok() && k.in.ok());
  ASSERT_TRUE(k.out->shm()->can_post(len));
  Pair none;
  auto sender = std::async(std::launch::async, [&] {
    TransferSpec spec;
    spec.send = p;
    spec.send_len = len;
    return transfer(&*k.out, &none, spec, 5, 0);
  });
  std::string got(len, '\0');
  TransferSpec spec;
  spec.recv = got.data();
  spec.recv_len = len;
  auto r = transfer(&none, &*k.in, spec, 5, 0);
  EXPECT_TRUE(r.ok()) << r.error().message;
  auto s = sender.get();
  EXPECT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(std::memcmp(got.data(), p, len), 0);
  EXPECT_FALSE(k.out->shm()->can_post(len));
  munmap(p, len);
  ::close(fd);
}

}  // namespace hvdrun::transport
