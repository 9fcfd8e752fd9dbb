#include "process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace testing_hvdrun {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string temp_file(const char* tag) {
  std::string path = std::string("/tmp/hvdrun-test-") + tag + "-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  return path;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string make_temp_dir() {
  std::string path = "/tmp/hvdrun-test-dir-XXXXXX";
  if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  return path;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

Process::Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env,
                 const std::string* input) {
  out_path_ = temp_file("out");
  err_path_ = temp_file("err");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (input) {
    in_path_ = temp_file("in");
    std::ofstream(in_path_, std::ios::binary) << *input;
    posix_spawn_file_actions_addopen(&fa, 0, in_path_.c_str(), O_RDONLY, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_addopen(&fa, 1, out_path_.c_str(), O_WRONLY | O_TRUNC, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_TRUNC, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    if (!extra_env.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& [k, v] : extra_env) env.push_back(k + "=" + v);
  std::vector<char*> a, ep;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) ep.push_back(const_cast<char*>(s.c_str()));
  ep.push_back(nullptr);
  int rc = posix_spawnp(&pid_, a[0], &fa, &attr, a.data(), ep.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("posix_spawnp " + argv[0] + " failed");
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(out_path_.c_str());
  unlink(err_path_.c_str());
  if (!in_path_.empty()) unlink(in_path_.c_str());
}

void Process::signal(int sig) { kill(pid_, sig); }

Outcome Process::wait(double seconds) {
  Outcome o;
  double deadline = now_s() + seconds;
  int st = 0;
  while (true) {
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) break;
    if (now_s() > deadline) {
      o.timed_out = true;
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reaped_ = true;
  o.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  o.out = read_file(out_path_);
  o.err = read_file(err_path_);
  return o;
}

Outcome run(const std::vector<std::string>& argv, double seconds, const std::map<std::string, std::string>& extra_env,
            const std::string* input) {
  Process p(argv, extra_env, input);
  return p.wait(seconds);
}

bool pid_alive(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t close = stat.rfind(')');
  return !(close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z');
}

std::vector<pid_t> wait_gone(const std::vector<pid_t>& pids, double seconds) {
  double deadline = now_s() + seconds;
  while (true) {
    std::vector<pid_t> alive;
    for (pid_t p : pids)
      if (pid_alive(p)) alive.push_back(p);
    if (alive.empty() || now_s() > deadline) return alive;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool wait_for_lines(const std::string& path, int lines, double seconds) {
  double deadline = now_s() + seconds;
  while (now_s() < deadline) {
    std::string s = read_file(path);
    int n = 0;
    for (char c : s) n += c == '\n';
    if (n >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace testing_hvdrun
