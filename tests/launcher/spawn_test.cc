// Starting one worker (launcher/spawn): real children, real pipes.
#include "launcher/spawn.h"
#include "launcher/exit_status.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <thread>

namespace hvdrun {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/hvdrun-spawn-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string file(const std::string& name, const std::string& text, mode_t mode) const {
    std::string p = path + "/" + name;
    std::ofstream(p) << text;
    chmod(p.c_str(), mode);
    return p;
  }
};

// Everything on `fd` until EOF (what came within 10 s, and a note saying so).
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) return out + "<no EOF within 10 s>";
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// The child's wait status, waiting at most 10 s (then it is killed: -1).
int reap(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 1000; ++i) {
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

SpawnRequest sh(const std::string& script, std::vector<std::string> env = {}) {
  SpawnRequest r;
  r.exe = "/bin/sh";
  r.argv = {"sh", "-c", script};
  r.env = std::move(env);
  return r;
}

TEST(ResolveProgram, FindsInPathAndNamesWhatIsWrong) {
  TempDir d;
  d.file("tool", "#!/bin/sh\n", 0755);
  d.file("plain", "text\n", 0644);
  mkdir((d.path + "/dir").c_str(), 0755);
  auto found = resolve_program("tool", "/nonexistent:" + d.path);
  ASSERT_TRUE(found.ok()) << found.error().message;
  EXPECT_EQ(*found, d.path + "/tool");
  auto missing = resolve_program("no-such-tool", d.path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(exit_code_for(missing.error()), 127);
  EXPECT_EQ(missing.error().message, "no-such-tool: command not found");
  // Found but not executable: 126, even when a later directory lacks it (execvp's rule).
  auto plain = resolve_program("plain", d.path + ":/nonexistent");
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(exit_code_for(plain.error()), 126);
  EXPECT_EQ(plain.error().message, "plain: permission denied");
  auto dir = resolve_program(d.path + "/dir", "");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(exit_code_for(dir.error()), 126);
  EXPECT_NE(dir.error().message.find("is a directory"), std::string::npos);
  EXPECT_FALSE(resolve_program("", "/bin").ok());
}

TEST(SpawnWorker, OwnProcessGroupOutputInPipesAndOnlyTheGivenEnvironment) {
  auto w = spawn_worker(sh("echo err >&2; echo \"out $FOO ${HOME:-nohome}\"; exec sleep 30", {"FOO=bar"}));
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(getpgid(w->pid), w->pid);  // its own group, already when spawn_worker returns
  EXPECT_NE(getpgid(w->pid), getpgid(0));
  std::string out;
  char buf[64];
  pollfd p{w->out.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  ssize_t n = read(w->out.get(), buf, sizeof buf);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "out bar nohome\n");
  ASSERT_EQ(kill(-w->pid, SIGTERM), 0);  // the group holds the worker
  EXPECT_EQ(read_all(w->err.get()), "err\n");
  int st = reap(w->pid);
  EXPECT_EQ(exit_code_of(st), 128 + SIGTERM);
}

TEST(SpawnWorker, TheWorkerGetsDefaultSignalsEvenWhenHvdrunIgnoresOrBlocksThem) {
  struct sigaction ign {}, old_usr1 {};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGUSR1, &ign, &old_usr1), 0);
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR2);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old_mask), 0);
  auto w1 = spawn_worker(sh("kill -USR1 $$; echo survived"));
  auto w2 = spawn_worker(sh("kill -USR2 $$; echo survived"));
  sigaction(SIGUSR1, &old_usr1, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ASSERT_TRUE(w1.ok() && w2.ok());
  EXPECT_EQ(read_all(w1->out.get()), "");
  EXPECT_EQ(read_all(w2->out.get()), "");
  EXPECT_EQ(exit_code_of(reap(w1->pid)), 128 + SIGUSR1);
  EXPECT_EQ(exit_code_of(reap(w2->pid)), 128 + SIGUSR2);
}

TEST(SpawnWorker, TheChildRegistersItsGroupBeforeExec) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  SpawnRequest r = sh("exit 3");
  r.register_fd = fds[1];
  auto w = spawn_worker(r);
  close(fds[1]);
  ASSERT_TRUE(w.ok()) << w.error().message;
  int32_t v = 0;
  ASSERT_EQ(read(fds[0], &v, sizeof v), static_cast<ssize_t>(sizeof v));
  EXPECT_EQ(v, w->pid);
  close(fds[0]);
  EXPECT_EQ(exit_code_of(reap(w->pid)), 3);
}

// A child whose exec fails has registered its group, and is reaped by spawn_worker at once:
// it takes its group back off the watchdog's list before it exits, so that the watchdog
// never signals the id once it is free for another process.
TEST(SpawnWorker, AChildWhoseExecFailedUnregistersItsGroupBeforeItExits) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  SpawnRequest r = sh("");
  r.exe = "/nonexistent/hvdrun-test-program";
  r.argv = {"hvdrun-test-program"};
  r.register_fd = fds[1];
  auto w = spawn_worker(r);
  close(fds[1]);
  ASSERT_FALSE(w.ok());
  int32_t v[3] = {0, 0, 0};
  ssize_t n = read_all(fds[0]).copy(reinterpret_cast<char*>(v), sizeof v);
  close(fds[0]);
  ASSERT_EQ(n, static_cast<ssize_t>(2 * sizeof(int32_t))) << "registered, then unregistered: two words";
  EXPECT_GT(v[0], 0);
  EXPECT_EQ(v[1], -v[0]);
}

TEST(SpawnWorker, StdinIsTheGivenDescriptorOrDevNull) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  SpawnRequest r = sh("exec cat");
  r.stdin_fd = fds[0];
  auto w = spawn_worker(r);
  close(fds[0]);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(write(fds[1], "to the worker\n", 14), 14);
  close(fds[1]);
  EXPECT_EQ(read_all(w->out.get()), "to the worker\n");
  EXPECT_EQ(exit_code_of(reap(w->pid)), 0);
  auto n = spawn_worker(sh("exec cat"));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(read_all(n->out.get()), "");  // /dev/null: EOF at once
  EXPECT_EQ(exit_code_of(reap(n->pid)), 0);
}

// An exec that fails is reported by spawn_worker itself, with the shell's exit code
// (127: not found, 126: not executable), and its child is reaped.
TEST(SpawnWorker, ExecFailureIsReportedWithItsCode) {
  TempDir d;
  SpawnRequest missing = sh("");
  missing.exe = d.path + "/gone";
  missing.argv = {"gone"};
  auto m = spawn_worker(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.error()), 127);
  EXPECT_EQ(m.error().message, "gone: No such file or directory");
  SpawnRequest plain = sh("");
  plain.exe = d.file("plain", "text\n", 0644);
  plain.argv = {"plain"};
  auto p = spawn_worker(plain);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(exit_code_for(p.error()), 126);
  EXPECT_EQ(p.error().message, "plain: Permission denied");
  int st;
  EXPECT_LE(waitpid(-1, &st, WNOHANG), 0) << "a failed spawn left a child to reap";
}

// A cancel that comes once a helper has answered and closed its output, before that output
// was read, takes its answer: only a helper whose output is still open is cancelled (an
// agent's Python probe that had answered lost its facts to the job's end, under load:
// RemoteAgent.SendsThePythonFactsOnceTheWorkersRun).
TEST(CollectCaptured, ACancelAfterTheHelperClosedItsOutputTakesItsAnswer) {
  auto w = spawn_worker(sh("echo answer; echo note >&2", {}));
  ASSERT_TRUE(w.ok()) << w.error().message;
  for (int fd : {w->out.get(), w->err.get()}) {  // both ended (POLLHUP), nothing read yet
    pollfd p{fd, 0, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1);
    ASSERT_TRUE(p.revents & POLLHUP);
  }
  int cancel[2];
  ASSERT_EQ(pipe2(cancel, O_CLOEXEC), 0);
  ASSERT_EQ(write(cancel[1], "x", 1), 1);
  Captured c = collect_captured(*w, 30, cancel[0]);
  close(cancel[0]);
  close(cancel[1]);
  EXPECT_FALSE(c.cancelled);
  EXPECT_EQ(c.out, "answer\n");
  EXPECT_EQ(c.err, "note\n");
  EXPECT_EQ(exit_code_of(c.status), 0);
}

TEST(ExitCode, AsAShellReportsIt) {
  EXPECT_EQ(exit_code_of(0), 0);
  EXPECT_EQ(exit_code_of(7 << 8), 7);
  EXPECT_EQ(exit_code_of(SIGKILL), 128 + SIGKILL);
}

}  // namespace
}  // namespace hvdrun
