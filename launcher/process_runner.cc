#include "launcher/process_runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hvdrun {
namespace {

struct ProcStat {
  pid_t pid;
  char state;
  pid_t ppid, pgrp;
};

// One process's /proc/PID/stat (pid, state, parent, process group); false when it is gone.
bool read_stat(long pid, ProcStat& out) {
  char path[64], buf[512];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* rp = std::strrchr(buf, ')');  // comm may hold spaces and parentheses
  if (!rp) return false;
  char state = 0;
  long ppid = 0, pgrp = 0;
  if (std::sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) return false;
  out = ProcStat{static_cast<pid_t>(pid), state, static_cast<pid_t>(ppid), static_cast<pid_t>(pgrp)};
  return true;
}

// Every process's /proc/PID/stat.
template <class F>
void for_each_process(F&& f) {
  DIR* d = opendir("/proc");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    ProcStat p;
    if (pid > 0 && !*end && read_stat(pid, p)) f(p);
  }
  closedir(d);
}

// This process's children as the kernel lists them per thread (/proc/self/task/TID/children:
// a child belongs to the thread that forked it, an adopted orphan to the thread chosen as
// its reaper): a cost that grows with our threads and children, not with the processes on
// the host. False when the kernel has no such file (CONFIG_PROC_CHILDREN off).
bool own_children(std::set<pid_t>& out) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return false;
  bool listed = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
    FILE* f = std::fopen(path.c_str(), "re");
    if (!f) continue;
    listed = true;
    long pid;
    ProcStat p;
    while (std::fscanf(f, "%ld", &pid) == 1)
      if (read_stat(pid, p) && p.state != 'Z') out.insert(p.pid);
    std::fclose(f);
  }
  closedir(d);
  return listed;
}

class SystemProcessRunner : public ProcessRunner {
 public:
  double now() override {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
  }
  Result<SpawnedWorker> spawn(const SpawnRequest& req) override { return spawn_worker(req); }
  std::vector<std::pair<pid_t, int>> reap() override {
    std::vector<std::pair<pid_t, int>> out;
    while (true) {
      int st = 0;
      pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid <= 0) break;
      out.emplace_back(pid, st);
    }
    return out;
  }
  void signal_group(pid_t pgid, int sig) override { kill(-pgid, sig); }
  void signal_process(pid_t pid, int sig) override { kill(pid, sig); }
  bool group_alive(pid_t pgid) override { return kill(-pgid, 0) == 0 || errno == EPERM; }
  pid_t group_of(pid_t pid) override { return getpgid(pid); }
  std::set<pid_t> children() override {
    std::set<pid_t> out;
    if (own_children(out)) return out;
    pid_t self = getpid();
    for_each_process([&](const ProcStat& p) {
      if (p.ppid == self && p.state != 'Z') out.insert(p.pid);
    });
    return out;
  }
  // Not a tracing stop ('t'): a sanitizer's leak check at exit ptrace-stops the exiting rank
  // for a moment (and a rank held by a debugger is named by the reports anyway).
  std::set<pid_t> stopped_groups() override {
    std::set<pid_t> out;
    for_each_process([&](const ProcStat& p) {
      if (p.state == 'T') out.insert(p.pgrp);
    });
    return out;
  }
  bool sent_by_slurm(pid_t sender) override {
    if (sender <= 0) return false;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/comm", static_cast<int>(sender));
    std::string comm;
    if (FILE* f = std::fopen(path, "r")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof buf, f)) comm = buf;
      std::fclose(f);
    }
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    return comm.rfind("slurmstepd", 0) == 0;
  }
  UniqueFd open_signals() override {
    sigset_t sigs;
    sigemptyset(&sigs);
    for (int s : handled_signals()) sigaddset(&sigs, s);
    return UniqueFd(signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  std::vector<std::pair<int, pid_t>> read_signals(int fd) override {
    std::vector<std::pair<int, pid_t>> out;
    signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
      out.emplace_back(static_cast<int>(si.ssi_signo), static_cast<pid_t>(si.ssi_pid));
    return out;
  }
  void stop_self() override { kill(getpid(), SIGSTOP); }
  int wait(pollfd* fds, size_t n, int timeout_ms) override { return poll(fds, n, timeout_ms); }
};

}  // namespace

ProcessRunner& system_process_runner() {
  static SystemProcessRunner runner;
  return runner;
}

}  // namespace hvdrun
