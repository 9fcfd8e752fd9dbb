// The runtime in an elastic job (collectives/runtime_elastic.cc), without hvdrun: worker
// processes (elastic_worker.cc, through the C API) against a rendezvous whose store the test
// writes as hvdrun's elastic driver does (docs/ELASTIC.md: round keys, slot keys, updates).
// Every worker runs with HVDRUN_TIMEOUT=600: a collective that returns does so because of the
// round's end, never a time-out; every read of a worker's output has a deadline.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../rendezvous/fake_rendezvous.h"
#include "common/deadline.h"
#include "common/strings.h"
#include "hvdrun/hvdrun.h"
#include "rendezvous/client.h"
#include "transport/socket_util.h"

extern char** environ;

namespace hvdrun {
namespace {

using rdv::FakeRendezvous;

// One worker process: its commands in argv, its output line by line.
class Worker {
 public:
  Worker(const std::map<std::string, std::string>& env, const std::vector<std::string>& cmds) {
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<std::string> args = {ELASTIC_WORKER};
    args.insert(args.end(), cmds.begin(), cmds.end());
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    for (auto& e : envs) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, ELASTIC_WORKER, &fa, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Worker() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(stdin_);
    ::close(stdout_);
  }
  // The next line of output ("" after 60 s or at its end).
  std::string line() {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      pollfd p{stdout_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) return "";
      char b[256];
      ssize_t n = ::read(stdout_, b, sizeof b);
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
  }
  void go() { EXPECT_EQ(::write(stdin_, "\n", 1), 1); }
  // The exit status (-1 if it did not exit within 60 s: then it is killed).
  int exit_status() {
    for (int i = 0; i < 6000; ++i) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      ::poll(nullptr, 0, 10);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int stdin_ = -1, stdout_ = -1;
  std::string buf_;
};

class RuntimeElastic : public ::testing::Test {
 protected:
  std::string secret_ = rdv::new_secret();
  FakeRendezvous rdv_{secret_};

  std::unique_ptr<Worker> start(const std::string& slot, const std::vector<std::string>& cmds) {
    std::map<std::string, std::string> env = {
        {"HVDRUN_RENDEZVOUS_ADDR", "127.0.0.1"}, {"HVDRUN_RENDEZVOUS_PORT", std::to_string(rdv_.port())},
        {"HVDRUN_SECRET", to_hex(secret_.data(), secret_.size())},
        {"HVDRUN_ELASTIC", "1"}, {"HOROVOD_ELASTIC", "1"}, {"HVDRUN_ELASTIC_ROUND", "1"},
        {"HVDRUN_ELASTIC_SLOT", slot}, {"HOROVOD_HOSTNAME", "a"},
        {"HVDRUN_TIMEOUT", "600"}, {"HVDRUN_START_TIMEOUT", "30"}};
    return std::make_unique<Worker>(env, cmds);
  }
  // Round `round`'s keys as hvdrun writes them: the slots, then the round.
  void write_round(int round, int size, const std::map<std::string, std::string>& slots) {
    rdv_.begin_round(round, size);
    for (const auto& [slot, value] : slots) rdv_.set("hvdrun/elastic/round/" + std::to_string(round) + "/slot/" + slot, value);
    rdv_.set("hvdrun/elastic/round", std::to_string(round));
  }
};

// Issue 28 items 3 and 4: three workers form round 1; slot a:2 stops taking part (alive,
// not in any collective); the update that ends round 1 makes the two others' blocked
// allreduce return HVD_ERR_RESET (HVDRUN_TIMEOUT is 600 s: nothing else could end it), and
// hvd_shutdown leaves no operation alive (Horovod's #3109); hvd_init then joins round 2 with
// its new rank and size, and the allreduce there sums both; a:2's hvd_init is HVD_ERR_REMOVED.
TEST_F(RuntimeElastic, AnUpdateEndingTheRoundResetsTheBlockedCollectivesAndInitJoinsTheNext) {
  write_round(1, 3, {{"a:0", "0 3 0 3 0 1"}, {"a:1", "1 3 1 3 0 1"}, {"a:2", "2 3 2 3 0 1"}});
  // "await 1", not "updates": a survivor's allreduce may end first because its peer's ring
  // was interrupted (kPeerLost, told as HVD_ERR_RESET in an elastic job), before its own
  // watcher has been told of update 1 (hvd_elastic_updates answers what it was told so far).
  const std::vector<std::string> survivor = {"init", "allreduce", "1", "await", "1", "async", "1", "shutdown",
                                             "init", "updates", "allreduce", "0", "shutdown"};
  std::vector<std::unique_ptr<Worker>> w;
  for (int i = 0; i < 2; ++i) {
    auto cmds = survivor;
    cmds[2] = std::to_string(10 * (i + 1));  // round 1's value
    cmds[11] = std::to_string(i + 1);        // round 2's value
    w.push_back(start("a:" + std::to_string(i), cmds));
  }
  w.push_back(start("a:2", {"init", "pause", "shutdown", "init"}));
  EXPECT_EQ(w[0]->line(), "init 0 0 3");
  EXPECT_EQ(w[1]->line(), "init 0 1 3");
  EXPECT_EQ(w[2]->line(), "init 0 2 3");
  EXPECT_EQ(w[2]->line(), "pause");
  // Round 2: a:0 and a:1 swap ranks, a:2 is removed; then the update that ends round 1.
  write_round(2, 2, {{"a:0", "1 2 1 2 0 1"}, {"a:1", "0 2 0 2 0 1"}, {"a:2", "removed"}});
  rdv_.set("hvdrun/elastic/update/1", std::to_string(HVD_HOSTS_REMOVED) + " 1");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(w[i]->line(), "allreduce " + std::to_string(HVD_ERR_RESET) + " 0") << "slot a:" << i;
    EXPECT_EQ(w[i]->line(), "updates 1 " + std::to_string(HVD_HOSTS_REMOVED)) << "slot a:" << i;
    // A later collective of the round fails the same way, and shutdown frees its handle.
    EXPECT_EQ(w[i]->line(), "async " + std::to_string(HVD_ERR_RESET) + " 0") << "slot a:" << i;
    EXPECT_EQ(w[i]->line(), "shutdown 0 0") << "slot a:" << i;
  }
  EXPECT_EQ(w[0]->line(), "init 0 1 2");
  EXPECT_EQ(w[1]->line(), "init 0 0 2");
  for (int i = 0; i < 2; ++i) {
    // Update 1 formed round 2: nothing newer since.
    EXPECT_EQ(w[i]->line(), "updates 1 0") << "slot a:" << i;
    EXPECT_EQ(w[i]->line(), "allreduce 0 3") << "slot a:" << i;
    EXPECT_EQ(w[i]->line(), "shutdown 0 0") << "slot a:" << i;
    EXPECT_EQ(w[i]->exit_status(), 0);
  }
  w[2]->go();
  EXPECT_EQ(w[2]->line(), "shutdown 0 0");
  EXPECT_EQ(w[2]->line(), "init " + std::to_string(HVD_ERR_REMOVED) + " -1 -1");
  EXPECT_EQ(w[2]->exit_status(), 0);
}

// A worker whose round is over before it registers (the round key it read is stale): the
// rendezvous answers kStaleRound with its round, and the worker registers with its numbers
// there.
TEST_F(RuntimeElastic, AStaleRoundRegistersWithTheNewestRoundsNumbers) {
  write_round(1, 2, {{"a:0", "1 2 0 1 1 2"}});
  rdv_.set("hvdrun/elastic/round/2/slot/a:0", "0 1 0 1 0 1");
  rdv_.begin_round(2, 1);  // the server is at round 2; the round key still says 1
  auto w = start("a:0", {"init", "allreduce", "5", "shutdown"});
  EXPECT_EQ(w->line(), "init 0 0 1");
  EXPECT_EQ(w->line(), "allreduce 0 5");
  EXPECT_EQ(w->line(), "shutdown 0 0");
  EXPECT_EQ(rdv_.stale_answers(), 1);
  EXPECT_EQ(w->exit_status(), 0);
}

// Updates that do not end this round (hosts added; another round's end) are told, with
// the kinds of both, and the round's collectives go on.
TEST_F(RuntimeElastic, AnUpdateThatKeepsTheRoundIsToldAndCollectivesGoOn) {
  write_round(1, 1, {{"a:0", "0 1 0 1 0 1"}});
  auto w = start("a:0", {"init", "updates", "await", "2", "allreduce", "2", "shutdown"});
  EXPECT_EQ(w->line(), "init 0 0 1");
  EXPECT_EQ(w->line(), "updates 0 0");
  write_round(2, 2, {{"a:0", "0 2 0 2 0 1"}, {"b:0", "1 2 0 1 1 2"}});
  rdv_.set("hvdrun/elastic/update/1", std::to_string(HVD_HOSTS_ADDED) + " 0");
  rdv_.set("hvdrun/elastic/update/2", std::to_string(HVD_HOSTS_REMOVED) + " 7");  // not this round
  EXPECT_EQ(w->line(), "updates 2 " + std::to_string(HVD_HOSTS_ADDED | HVD_HOSTS_REMOVED));
  EXPECT_EQ(w->line(), "allreduce 0 2");
  EXPECT_EQ(w->line(), "shutdown 0 0");
  EXPECT_EQ(w->exit_status(), 0);
}

// Issue 28: a round that ends while hvd_init connects its ring (a peer of the new ring
// registered, then died before it connected) ends that hvd_init at once with HVD_ERR_RESET,
// and the next hvd_init joins the next round. HVDRUN_TIMEOUT is 600 s: only the round's end
// can end the first hvd_init within the line's deadline.
TEST_F(RuntimeElastic, ARoundEndingWhileInitConnectsItsRingFailsThatInitWithReset) {
  write_round(1, 2, {{"a:0", "0 2 0 2 0 1"}, {"a:1", "1 2 1 2 0 1"}});
  auto w = start("a:0", {"init", "init", "allreduce", "4", "shutdown"});
  {
    // Slot a:1 is this test: it registers, and is gone (its listener closed) before a:0
    // connects to it or it to a:0.
    auto peer = transport::listen_tcp("127.0.0.1", "127.0.0.1");
    ASSERT_TRUE(peer);
    auto client = rdv::Client::connect("127.0.0.1", rdv_.port(), secret_, deadline_in(30));
    ASSERT_TRUE(client);
    rdv::RegisterRequest req{1, 2, "a", peer->addr, peer->port};
    req.round = 1;
    auto stale = [](int64_t) -> Result<rdv::RegisterRequest> { return make_error(ErrorKind::kInternal, "stale"); };
    ASSERT_TRUE(client->register_in_round(req, stale, deadline_in(60)));
  }
  ASSERT_TRUE(rdv_.wait_registered(2));  // a:0 has its neighbours: it is connecting its ring
  write_round(2, 1, {{"a:0", "0 1 0 1 0 1"}, {"a:1", "removed"}});
  rdv_.set("hvdrun/elastic/update/1", std::to_string(HVD_HOSTS_REMOVED) + " 1");
  EXPECT_EQ(w->line(), "init " + std::to_string(HVD_ERR_RESET) + " -1 -1");
  EXPECT_EQ(w->line(), "init 0 0 1");
  EXPECT_EQ(w->line(), "allreduce 0 4");
  EXPECT_EQ(w->line(), "shutdown 0 0");
  EXPECT_EQ(w->exit_status(), 0);
}

}  // namespace
}  // namespace hvdrun
