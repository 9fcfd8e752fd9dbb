#include "launcher/watchdog.h"

#include "launcher/exit_status.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace hvdrun {
namespace {

constexpr int32_t kDisarm = 0;
constexpr int kMaxGroups = 1 << 16;

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// Runs in the forked child: only async-signal-safe calls from here on.
[[noreturn]] void watchdog_main(int fd, double grace) {
  static int32_t groups[kMaxGroups];
  int n = 0;
  bool disarmed = false;
  while (true) {
    int32_t v;
    ssize_t r = read(fd, &v, sizeof v);
    if (r < 0 && errno == EINTR) continue;
    if (r != static_cast<ssize_t>(sizeof v)) break;  // EOF: hvdrun is gone
    if (v == kDisarm) {
      disarmed = true;
      break;
    }
    if (v < 0) {  // forget(): that group has ended, and its id may become another's
      for (int i = 0; i < n;)
        if (groups[i] == -v) groups[i] = groups[--n];
        else ++i;
      continue;
    }
    if (n < kMaxGroups) groups[n++] = v;
  }
  if (disarmed) _exit(0);
  for (int i = 0; i < n; ++i) {
    kill(-groups[i], SIGCONT);  // a stopped group would hold SIGTERM until the SIGKILL
    kill(-groups[i], SIGTERM);
  }
  long waited = 0, grace_ms = static_cast<long>(grace * 1000);
  while (waited < grace_ms) {
    bool any = false;
    for (int i = 0; i < n && !any; ++i) any = kill(-groups[i], 0) == 0;
    if (!any) _exit(0);
    sleep_ms(50);
    waited += 50;
  }
  for (int i = 0; i < n; ++i) kill(-groups[i], SIGKILL);
  _exit(0);
}

}  // namespace

Result<Watchdog> Watchdog::start(double grace_seconds) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return error_of(ErrorKind::kLaunchFailed, std::string("watchdog: pipe: ") + std::strerror(errno));
  UniqueFd rd(fds[0]), wr(fds[1]);
  pid_t pid = fork();
  if (pid < 0) return error_of(ErrorKind::kLaunchFailed, std::string("watchdog: fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Own process group, deaf to the signals meant for hvdrun and its terminal.
    setpgid(0, 0);
    prctl(PR_SET_NAME, "hvdrun-watchdog");
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU})
      sigaction(s, &sa, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    // Close everything but the pipe's read end.
    if (rd.get() > 3) close_range(3, static_cast<unsigned>(rd.get()) - 1, 0);
    close_range(static_cast<unsigned>(rd.get()) + 1, ~0U, 0);
    watchdog_main(rd.get(), grace_seconds);
  }
  Watchdog w;
  w.pipe_ = std::move(wr);
  w.pid_ = pid;
  return w;
}

Watchdog::~Watchdog() {
  // Closing without disarm() makes the watchdog clean up: the safe default on any path.
  pipe_.reset();
  if (pid_ > 0) {
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

void Watchdog::watch(pid_t pgid) {
  int32_t v = pgid;
  while (write(pipe_.get(), &v, sizeof v) < 0 && errno == EINTR) {
  }
}

void Watchdog::forget(pid_t pgid) {
  int32_t v = -pgid;
  while (write(pipe_.get(), &v, sizeof v) < 0 && errno == EINTR) {
  }
}

void Watchdog::disarm() {
  int32_t v = kDisarm;
  while (write(pipe_.get(), &v, sizeof v) < 0 && errno == EINTR) {
  }
}

}  // namespace hvdrun
