// hvdrun's relay thread for one remote host (RemoteHost), over a fake link: what it does
// when the link stops taking bytes.
#include "launcher/remote_host.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "hvdrun_version.h"
#include "launcher/agent.h"
#include "launcher/agent_wire.h"
#include "launcher/output_sink.h"
#include "pid_holder.h"

namespace hvdrun {
namespace {

using agentwire::Type;
using Clock = std::chrono::steady_clock;

class RecordingSink : public OutputSink {
 public:
  void write_lines(int, StreamKind, std::string_view) override {}
  bool congested() const override { return false; }
  void notice(std::string_view line) override {
    {
      std::lock_guard<std::mutex> lk(mu);
      notices.emplace_back(line);
    }
    cv.notify_all();
  }
  void drain() override {}
  // Until there is a notice, or 20 s have passed; whether there is one.
  bool wait_for_a_notice() {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(20), [this] { return !notices.empty(); });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> notices;
};

// An agent's link that has said hello (the first read returns it) on host "b"; what it
// does with writes and later reads is the test's.
class FakeLink : public HostLink {
 public:
  FakeLink() {
    AgentHello h;
    h.version = HVDRUN_VERSION_STRING;
    h.facts.protocol = agentwire::kProtocol;
    pending_ = agentwire::encode(Type::kHello, encode_hello(h));
  }
  const std::string& label() const override { return label_; }
  std::string stderr_text() override { return ""; }
  std::optional<int> exit_status() override { return std::nullopt; }
  std::string local_address() const override { return ""; }
  std::string peer_address() const override { return ""; }

 protected:
  std::string label_ = "b";
  std::string pending_;
};

// An agent that said hello, then went silent and stopped reading once it had the start
// (stopped, or its client or the network is): the link's buffer is full, and a write
// blocks (here for `block_for`, a pipe's would block for good).
class FullLink : public FakeLink {
 public:
  explicit FullLink(double block_for) : block_for_(block_for) {}
  Status write(std::string_view data) override {
    if (full_) {
      blocked_writes++;
      std::this_thread::sleep_for(std::chrono::duration<double>(block_for_));
      return {};
    }
    if (data.size() > 4 && static_cast<Type>(data[4]) == Type::kStart) full_ = true;
    return {};
  }
  size_t write_room() override { return full_ ? 0 : 65536; }
  Result<std::string> read(int timeout_ms) override {
    if (!pending_.empty()) return std::exchange(pending_, std::string());
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return std::string();
  }

  std::atomic<int> blocked_writes{0};

 private:
  double block_for_;
  std::atomic<bool> full_{false};
};

class OneLinkStarter : public AgentStarter {
 public:
  explicit OneLinkStarter(std::unique_ptr<HostLink> link) : link_(std::move(link)) {}
  Result<std::unique_ptr<HostLink>> open(const std::string&, Clock::time_point) override { return std::move(link_); }

 private:
  std::unique_ptr<HostLink> link_;
};

// A link that takes nothing held the relay thread in a heartbeat's write, so it never saw
// the silence: hvdrun neither reported the lost contact nor ended (with a real pipe, not
// even on a second Ctrl-C). Found with hvdrun's stdin streaming to a remote rank 0 whose
// agent was stopped.
TEST(RemoteHost, LinkThatTakesNothingStillEndsInLostContact) {
  auto link = std::make_unique<FullLink>(/*block_for=*/10);
  FullLink* fake = link.get();
  OneLinkStarter starter(std::move(link));
  RemoteSettings rs;
  rs.heartbeat_timeout = 1;
  RemoteHost host("b", rs, starter);
  ASSERT_TRUE(host.connect(Clock::now() + std::chrono::seconds(5)).ok());
  host.signal(SIGUSR1);  // a signal to relay too: it waits, it does not block the thread
  RecordingSink sink;
  LocalAgent agent(AgentOptions{}, sink, nullptr);
  agent.set_remotes({&host});
  auto t0 = Clock::now();
  host.start(agent, sink);
  AgentResult r = agent.run({});
  double took = std::chrono::duration<double>(Clock::now() - t0).count();
  host.join();
  EXPECT_LT(took, 5) << "the relay thread was held in a write to a link that takes nothing";
  EXPECT_EQ(fake->blocked_writes.load(), 0);
  EXPECT_EQ(r.exit_code, 5);
  ASSERT_EQ(sink.notices.size(), 1u);
  EXPECT_NE(sink.notices[0].find("hvdrun: lost contact with the agent on b for "), std::string::npos) << sink.notices[0];
}

// An agent that reads everything: the signals written are recorded; it says kDone when told,
// and then exits (its output ends) `exit_after` later, saying `last_words` on stderr.
class RecordingLink : public FakeLink {
 public:
  explicit RecordingLink(double exit_after = 0, std::string last_words = "")
      : exit_after_(exit_after), last_words_(std::move(last_words)) {}
  Status write(std::string_view data) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a write takes a moment
    if (data.size() == 6 && static_cast<Type>(data[4]) == Type::kSignal) signals_written++;
    return {};
  }
  size_t write_room() override { return 65536; }
  Result<std::string> read(int timeout_ms) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!pending_.empty()) {
        if (done_said_ && !exits_at_) exits_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(exit_after_));
        return std::exchange(pending_, std::string());
      }
      if (exits_at_ && Clock::now() >= *exits_at_) {
        err_ = last_words_;
        exited_at = Clock::now();
        return make_error(ErrorKind::kPeerLost, "b: the agent closed its output");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 10)));
    return std::string();
  }
  std::string stderr_text() override {
    std::lock_guard<std::mutex> lk(mu_);
    return err_;
  }
  void say_done() {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ = agentwire::encode(Type::kDone, "{\"code\":0}");
    done_said_ = true;
  }

  std::atomic<int> signals_written{0};
  std::optional<Clock::time_point> exited_at;  // under mu_, read once the relay has ended

 private:
  std::mutex mu_;  // pending_, err_ and the times, between the test and the relay thread
  double exit_after_;
  std::string last_words_, err_;
  bool done_said_ = false;
  std::optional<Clock::time_point> exits_at_;
};

// One remote host "b" on a fake link, relaying into an agent (hvdrun's side of the job).
template <class L>
struct Relayed {
  explicit Relayed(std::unique_ptr<L> l)
      : fake(l.get()), starter(std::move(l)), host("b", RemoteSettings{}, starter), agent(AgentOptions{}, sink, nullptr) {}
  // Takes the link's hello and starts the relay thread (false: the hello was refused).
  bool start() {
    if (!host.connect(Clock::now() + std::chrono::seconds(5)).ok()) return false;
    agent.set_remotes({&host});
    host.start(agent, sink);
    return true;
  }
  L* fake;
  OneLinkStarter starter;
  RemoteHost host;
  RecordingSink sink;
  LocalAgent agent;
};

// Before hvdrun stops itself on Ctrl-Z it waits until the SIGSTOP for a remote host has
// been written to its link (the relay thread stops with hvdrun).
TEST(RemoteHost, WaitSignalsSentReturnsOnceTheyAreWritten) {
  Relayed<RecordingLink> rh(std::make_unique<RecordingLink>());
  ASSERT_TRUE(rh.start());
  int written_at_return = -1;
  double waited = -1;
  std::thread t([&] {
    rh.host.signal(SIGSTOP);
    rh.host.signal(SIGCONT);
    auto t0 = Clock::now();
    rh.host.wait_signals_sent(5);
    waited = std::chrono::duration<double>(Clock::now() - t0).count();
    written_at_return = rh.fake->signals_written.load();
    rh.fake->say_done();
  });
  AgentResult r = rh.agent.run({});
  t.join();
  rh.host.join();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(written_at_return, 2);
  EXPECT_LT(waited, 4);
}

// An agent that takes every frame at once and counts the bytes of stdin among them; it
// says what the test has it say (kStdinTaken, kDone), then exits.
class StdinLink : public FakeLink {
 public:
  Status write(std::string_view data) override {
    if (data.size() >= 5 && static_cast<Type>(data[4]) == Type::kStdin) {
      std::lock_guard<std::mutex> lk(mu_);
      stdin_bytes += data.size() - 5;
    }
    cv_.notify_all();
    return {};
  }
  size_t write_room() override { return 1 << 20; }
  Result<std::string> read(int timeout_ms) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      reads++;  // one a turn of the relay's loop, after it sent what it may
    }
    cv_.notify_all();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!pending_.empty()) return std::exchange(pending_, std::string());
      if (done_) return make_error(ErrorKind::kPeerLost, "b: the agent closed its output");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 10)));
    return std::string();
  }
  void say(Type t, const std::string& payload) {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ += agentwire::encode(t, payload);
    if (t == Type::kDone) done_ = true;  // and then it exits
  }
  // Until `holds()` (looked at after each write and read of the relay's), or 20 s.
  template <class Pred>
  void wait_until(Pred holds) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(20), holds);
  }
  std::atomic<size_t> stdin_bytes{0};
  std::atomic<int> reads{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// hvdrun's stdin goes to a remote rank 0 only as fast as rank 0 takes it: no more than
// kStdinWindow bytes that the agent has not said were taken. A rank 0 that did not read
// held every byte of hvdrun's stdin in its agent's memory (314 MB after 18 s of a fast pipe).
TEST(RemoteHost, StdinBeyondTheWindowWaitsUntilRankZeroTakesIt) {
  Relayed<StdinLink> rh(std::make_unique<StdinLink>());
  ASSERT_TRUE(rh.start());
  int in[2];  // hvdrun's stdin, relayed by the agent's loop
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  rh.agent.relay_stdin_to(&rh.host, in[0]);
  const size_t window = agentwire::kStdinWindow, chunk = 1 << 20;
  std::thread pump([&] {  // three windows' worth
    std::string data(chunk, 'x');
    for (size_t sent = 0; sent < 3 * window; sent += chunk)
      for (size_t off = 0; off < chunk;) {
        ssize_t n = write(in[1], data.data() + off, chunk - off);
        if (n <= 0) return;
        off += static_cast<size_t>(n);
      }
  });
  AgentResult r;
  std::thread loop([&] { r = rh.agent.run({}); });
  // Once `at_least` has been sent, two more turns of the relay's loop: each sends what
  // the window allows before it reads. What has been sent then is all it may send.
  auto settle = [&](size_t at_least) {
    StdinLink& l = *rh.fake;
    l.wait_until([&] { return l.stdin_bytes.load() >= at_least; });
    int turn = l.reads.load();
    l.wait_until([&] { return l.reads.load() >= turn + 2; });
    return l.stdin_bytes.load();
  };
  size_t first = settle(window);
  rh.fake->say(Type::kStdinTaken, "{\"bytes\":" + std::to_string(window) + "}");
  size_t second = settle(2 * window);
  rh.fake->say(Type::kStdinTaken, "{\"closed\":true}");  // rank 0 closed its stdin: the rest is dropped
  pump.join();
  rh.fake->say(Type::kDone, "{\"code\":0}");
  loop.join();
  rh.host.join();
  close(in[0]);
  close(in[1]);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(first, window) << "stdin sent before rank 0 had taken any";
  EXPECT_EQ(second, 2 * window) << "stdin sent once rank 0 had taken one window";
  EXPECT_LE(rh.fake->stdin_bytes.load(), 2 * window) << "stdin sent after rank 0 closed its stdin";
}

// hvdrun's stdin goes to a remote rank 0 from the agent's loop, and only while it runs:
// nothing reads it once the job is over (a thread left in read(0) took a line typed for
// the shell after hvdrun had been put in the background, and outlived the job).
TEST(RemoteHost, StdinIsReadOnlyWhileTheJobRuns) {
  Relayed<StdinLink> rh(std::make_unique<StdinLink>());
  ASSERT_TRUE(rh.start());
  int in[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  rh.agent.relay_stdin_to(&rh.host, in[0]);
  ASSERT_EQ(write(in[1], "during\n", 7), 7);
  AgentResult r;
  std::thread loop([&] { r = rh.agent.run({}); });
  rh.fake->wait_until([&] { return rh.fake->stdin_bytes.load() >= 7; });
  rh.fake->say(Type::kDone, "{\"code\":0}");
  loop.join();
  rh.host.join();
  ASSERT_EQ(write(in[1], "after\n", 6), 6);
  int unread = -1;
  EXPECT_EQ(ioctl(in[0], FIONREAD, &unread), 0);
  close(in[0]);
  close(in[1]);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(rh.fake->stdin_bytes.load(), 7u);
  EXPECT_EQ(unread, 6) << "hvdrun's stdin was read after the job";
}

// After its kDone the agent only exits; hvdrun returns once it has (its output ended), and
// shows what it said on stderr on its way out. hvdrun used to return at the kDone: an agent
// slow to exit outlived the job unseen (CI: one still running 10 s after hvdrun ended).
TEST(RemoteHost, RelayEndsOnceTheAgentHasExitedAfterItsLastReport) {
  Relayed<RecordingLink> rh(std::make_unique<RecordingLink>(/*exit_after=*/0.5, "leak report\n"));
  ASSERT_TRUE(rh.start());
  rh.fake->say_done();
  AgentResult r = rh.agent.run({});
  auto ended = Clock::now();
  rh.host.join();
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_TRUE(rh.fake->exited_at) << "the job ended before the agent had exited";
  EXPECT_GE(ended, *rh.fake->exited_at);
  ASSERT_EQ(rh.sink.notices.size(), 1u);
  EXPECT_EQ(rh.sink.notices[0], "hvdrun: b: leak report");
}

// A client (or agent) that says why on stderr and ends: its words come with the EOF.
class DyingLink : public FakeLink {
 public:
  Status write(std::string_view) override { return {}; }
  size_t write_room() override { return 65536; }
  Result<std::string> read(int) override {
    if (!pending_.empty()) return std::exchange(pending_, std::string());
    err_ = "Connection to b closed by remote host.\n";  // read in the same poll as the EOF
    return make_error(ErrorKind::kPeerLost, "b: the agent closed its output");
  }
  std::string stderr_text() override { return err_; }

 private:
  std::string err_;
};

TEST(RemoteHost, StderrThatCameWithTheEofIsShown) {
  OneLinkStarter starter(std::make_unique<DyingLink>());
  RemoteHost host("b", RemoteSettings{}, starter);
  ASSERT_TRUE(host.connect(Clock::now() + std::chrono::seconds(5)).ok());
  RecordingSink sink;
  LocalAgent agent(AgentOptions{}, sink, nullptr);
  agent.set_remotes({&host});
  host.start(agent, sink);
  AgentResult r = agent.run({});
  host.join();
  EXPECT_EQ(r.exit_code, 5);
  ASSERT_EQ(sink.notices.size(), 2u);
  EXPECT_EQ(sink.notices[0], "hvdrun: b: Connection to b closed by remote host.");
  EXPECT_NE(sink.notices[1].find("the agent closed its output"), std::string::npos) << sink.notices[1];
}

// An agent's reports with fields of the wrong type or out of range are passed over: the
// relay thread threw (json::value on a type mismatch, std::terminate) and hvdrun died.
TEST(RemoteHost, MalformedReportsArePassedOverNotThrownOn) {
  Relayed<StdinLink> rh(std::make_unique<StdinLink>());
  ASSERT_TRUE(rh.start());
  rh.fake->say(Type::kStdinTaken, "{\"bytes\":\"many\"}");
  rh.fake->say(Type::kStdinTaken, "{\"closed\":1}");
  rh.fake->say(Type::kExited, "{\"rank\":[1]}");
  rh.fake->say(Type::kSlurmSignal, "{\"signal\":\"TERM\"}");
  rh.fake->say(Type::kSlurmSignal, "{\"signal\":9}");     // SIGKILL: not a signal anyone heard
  rh.fake->say(Type::kSlurmSignal, "{\"signal\":1000}");  // no such signal
  rh.fake->say(Type::kSlurmSignal, "{\"signal\":1e400}");
  rh.fake->say(Type::kSlurmSignal, "{\"signal\":19}");  // SIGSTOP: agents report Slurm's SIGTERM only
  rh.fake->say(Type::kExited, "{\"rank\":\"0\"}");
  // 2^64 - 1 was compared as a signed number (-1) and taken: exit code 255.
  rh.fake->say(Type::kDone, "{\"code\":18446744073709551615,\"lost_contact_s\":99999999999}");
  AgentResult r = rh.agent.run({});
  rh.host.join();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(rh.sink.notices.empty()) << rh.sink.notices.front();
}

// Slurm's SIGTERM to a cancelled or timed-out job reaches the ranks before their agent
// (proctrack walks the tree from its leaves), and the batch step, where hvdrun runs, after
// the other steps: hvdrun may be tearing down on a rank killed by it by the time an agent
// reports its own. It is said then, once however many agents report it; it used to go
// unsaid (an agent tearing down took it for a second interrupt).
TEST(RemoteHost, SlurmSignalReportedDuringATeardownIsSaidOnce) {
  Relayed<StdinLink> rh(std::make_unique<StdinLink>());
  ASSERT_TRUE(rh.start());
  std::thread t([&] {
    rh.fake->say(Type::kFailed, "{\"rank\":0,\"status\":15}");  // killed by SIGTERM
    rh.sink.wait_for_a_notice();  // until hvdrun has named it (its teardown began)
    rh.fake->say(Type::kSlurmSignal, "{\"signal\":15}");
    rh.fake->say(Type::kSlurmSignal, "{\"signal\":15}");  // another host's agent, or a second scancel
    rh.fake->say(Type::kDone, "{\"code\":143}");
  });
  AgentResult r = rh.agent.run({});
  t.join();
  rh.host.join();
  EXPECT_EQ(r.exit_code, 143);
  const std::string said =
      "hvdrun: received SIGTERM from Slurm (the job was cancelled or reached its time limit), terminating the job";
  ASSERT_EQ(rh.sink.notices.size(), 2u);
  EXPECT_EQ(rh.sink.notices[0], "hvdrun: rank 0 (host b) was killed by signal 15 (SIGTERM)");
  EXPECT_EQ(rh.sink.notices[1], said);
}


// An agent whose hello says its clock (our clock then plus `skew`) and its protocol.
class HelloLink : public FullLink {
 public:
  HelloLink(double skew, int protocol) : FullLink(0), skew_(skew), protocol_(protocol) {}
  Result<std::string> read(int timeout_ms) override {
    if (!said_) {
      said_ = true;
      AgentHello h;
      h.version = "7.7.7";
      h.facts.protocol = protocol_;
      h.facts.clock =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + skew_;
      return agentwire::encode(Type::kHello, encode_hello(h));
    }
    return FullLink::read(timeout_ms);
  }

 private:
  double skew_;
  int protocol_;
  bool said_ = false;
};

double offset_of(double skew) {
  OneLinkStarter starter(std::make_unique<HelloLink>(skew, agentwire::kProtocol));
  RemoteHost host("b", RemoteSettings{}, starter);
  EXPECT_TRUE(host.connect(Clock::now() + std::chrono::seconds(5)).ok());
  return host.clock_offset();
}

TEST(RemoteHost, ClockOffsetIsOnlyWhatTheHellosTimingCannotExplain) {
  EXPECT_EQ(offset_of(0), 0);  // read between the host's making and its hello: no skew
  EXPECT_GT(offset_of(100), 99);
  EXPECT_LE(offset_of(100), 100);
  EXPECT_LT(offset_of(-100), -99);
  EXPECT_GE(offset_of(-100), -100);
}

TEST(RemoteHost, AnotherVersionIsRefusedOnlyForAnotherProtocol) {
  OneLinkStarter same(std::make_unique<HelloLink>(0, agentwire::kProtocol));
  RemoteHost a("b", RemoteSettings{}, same);
  EXPECT_TRUE(a.connect(Clock::now() + std::chrono::seconds(5)).ok());
  EXPECT_EQ(a.hello().facts.version, "7.7.7");
  OneLinkStarter other(std::make_unique<HelloLink>(0, agentwire::kProtocol + 1));
  RemoteSettings rs;
  rs.remote_hvdrun = "/opt/hvdrun";
  RemoteHost b("b", rs, other);
  auto st = b.connect(Clock::now() + std::chrono::seconds(5));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "b: remote hvdrun /opt/hvdrun is version 7.7.7 (agent protocol " +
                                    std::to_string(agentwire::kProtocol + 1) + "), this one " + HVDRUN_VERSION_STRING +
                                    " (protocol " + std::to_string(agentwire::kProtocol) +
                                    "): they cannot talk; install the same version on every host");
}

// An agent with endless output: every read brings another 64 KiB of lines, until told to
// say kDone.
class FloodLink : public FakeLink {
 public:
  Status write(std::string_view) override { return {}; }
  size_t write_room() override { return 65536; }
  Result<std::string> read(int) override {
    if (!pending_.empty()) return std::exchange(pending_, std::string());
    if (done_sent_) return make_error(ErrorKind::kPeerLost, "b: the agent closed its output");  // it exited
    if (done_) {
      done_sent_ = true;
      return agentwire::encode(Type::kDone, "{\"code\":0}");
    }
    return agentwire::encode_output(0, 0, std::string(65535, 'x') + "\n");  // a whole frame
  }
  std::atomic<bool> done_{false};

 private:
  bool done_sent_ = false;
};

// A sink whose reader has stopped once it holds `limit` bytes (a terminal's pager that the
// user left): it counts what it was given, and how often it was asked while congested.
class StuckSink : public RecordingSink {
 public:
  explicit StuckSink(size_t limit) : limit_(limit) {}
  void write_lines(int, StreamKind, std::string_view lines) override { bytes += lines.size(); }
  bool congested() const override {
    bool c = !released && bytes.load() >= limit_;
    if (c) asked_while_congested++;
    return c;
  }
  std::atomic<size_t> bytes{0};
  std::atomic<bool> released{false};
  mutable std::atomic<int> asked_while_congested{0};

 private:
  size_t limit_;
};

// A remote host's output is held in its link while hvdrun's output is congested (back
// pressure to the agent, as the local ranks' pipes are not read): it used to be handed to
// the sink's unbounded queue whatever the reader did.
TEST(RemoteHost, OutputWaitsInTheLinkWhileTheSinkIsCongested) {
  auto link = std::make_unique<FloodLink>();
  FloodLink* fake = link.get();
  OneLinkStarter starter(std::move(link));
  RemoteHost host("b", RemoteSettings{}, starter);
  ASSERT_TRUE(host.connect(Clock::now() + std::chrono::seconds(5)).ok());
  StuckSink sink(1 << 20);
  LocalAgent agent(AgentOptions{}, sink, nullptr);
  agent.set_remotes({&host});
  size_t held = 0;
  bool asked = false;
  std::thread reader([&] {
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (sink.asked_while_congested.load() < 50 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    asked = sink.asked_while_congested.load() >= 50;
    held = sink.bytes.load();
    sink.released = true;  // the reader is back; the agent then ends
    fake->done_ = true;
  });
  host.start(agent, sink);
  AgentResult r = agent.run({});
  host.join();
  reader.join();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(asked) << "the relay never asked whether the sink had room; bytes " << held << ", asked "
                     << sink.asked_while_congested.load();
  EXPECT_LE(held, (1u << 20) + 2 * 65536) << "the relay kept handing output to a congested sink";
}

}  // namespace
}  // namespace hvdrun
