#include "launcher/budget.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

constexpr long long kFilesMargin = 64;    // hvdrun's own: logs, the watchdog, the listener, epoll...
constexpr long long kFilesPerHost = 4;    // an SSH session, its pipes
constexpr long long kTasksMargin = 16;    // hvdrun's threads, the watchdog

long long count_dir(const char* path) {
  long long n = 0;
  DIR* d = opendir(path);
  if (!d) return 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

long long read_number(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (!f) return -1;
  long long v = -1;
  if (std::fscanf(f, "%lld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}

std::string rlimit_text(long long v) { return v < 0 ? "unlimited" : std::to_string(v); }

}  // namespace

long long files_needed(const BudgetNeed& need) {
  return kFilesMargin + 2 * need.local_ranks + need.all_ranks + kFilesPerHost * need.remote_hosts;
}

long long tasks_needed(const BudgetNeed& need) { return need.local_ranks + kTasksMargin + need.remote_hosts; }

Status check_process_budget(const ProcessBudget& have, const BudgetNeed& need) {
  auto over_limit = [](std::string message) { return error_of(ErrorKind::kResourceLimit, std::move(message)); };
  auto ranks = [&] {
    return std::to_string(need.all_ranks) + " rank" + (need.all_ranks == 1 ? "" : "s") +
           (need.local_ranks != need.all_ranks ? " (" + std::to_string(need.local_ranks) + " on this host)" : "");
  };
  if (have.nofile >= 0) {
    long long files = files_needed(need) + have.nofile_in_use;
    if (files > have.nofile)
      return over_limit(ranks() + " need about " + std::to_string(files) +
                        " open files in hvdrun, over its limit of " + std::to_string(have.nofile) +
                        " (RLIMIT_NOFILE, 'ulimit -n'); raise the limit or start fewer ranks");
  }
  long long tasks = tasks_needed(need);
  if (have.nproc >= 0 && have.nproc_in_use + tasks > have.nproc)
    return over_limit(ranks() + " need " + std::to_string(tasks) + " more processes, but this user may start only " +
                      std::to_string(std::max(0LL, have.nproc - have.nproc_in_use)) + " more (RLIMIT_NPROC " +
                      rlimit_text(have.nproc) + ", 'ulimit -u', " + std::to_string(have.nproc_in_use) +
                      " in use); raise the limit or start fewer ranks");
  if (have.pid_max >= 0 && have.tasks_in_use + tasks > have.pid_max)
    return over_limit(ranks() + " need " + std::to_string(tasks) + " more processes, but the system has room for only " +
                      std::to_string(std::max(0LL, have.pid_max - have.tasks_in_use)) +
                      " more (kernel.pid_max / kernel.threads-max " + std::to_string(have.pid_max) + ", " +
                      std::to_string(have.tasks_in_use) + " in use); start fewer ranks");
  return {};
}

namespace {

// This user's tasks, counted in /proc (what RLIMIT_NPROC counts, as far as this pid
// namespace shows it): a stat of every process on the host, so only for the message of a
// launch already refused.
long long count_user_tasks(uid_t uid) {
  long long n = 0;
  DIR* d = opendir("/proc");
  while (d) {
    dirent* e = readdir(d);
    if (!e) break;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string dir = std::string("/proc/") + e->d_name;
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || st.st_uid != uid) continue;
    n += std::max(1LL, count_dir((dir + "/task").c_str()));
  }
  if (d) closedir(d);
  return n;
}

// Whether this user may start `tasks` more, as the kernel itself counts them (its own
// per-user count, which sees every pid namespace): with our soft RLIMIT_NPROC lowered by
// `tasks` - 1 for a moment, one vfork that exits at once succeeds exactly when `tasks`
// more fit under the real limit. Its cost is one short-lived process, whatever runs on
// the host (a /proc scan paid for each of the host's processes on every launch).
bool nproc_has_room(rlimit limit, long long tasks) {
  if (tasks <= 1) tasks = 1;
  if (static_cast<long long>(limit.rlim_cur) < tasks) return false;  // we are one already
  rlimit probe = limit;
  probe.rlim_cur = limit.rlim_cur - static_cast<rlim_t>(tasks - 1);
  if (setrlimit(RLIMIT_NPROC, &probe) != 0) return true;  // cannot probe: the spawn will say
  pid_t pid = vfork();
  if (pid == 0) _exit(0);
  int fork_errno = errno;
  setrlimit(RLIMIT_NPROC, &limit);
  if (pid < 0) return fork_errno != EAGAIN;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return true;
}

}  // namespace

ProcessBudget read_process_budget(long long tasks) {
  ProcessBudget b;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) b.nofile = static_cast<long long>(rl.rlim_cur);
  b.nofile_in_use = count_dir("/proc/self/fd");
  // RLIMIT_NPROC counts the real user's tasks; the kernel does not enforce it for root.
  // They are counted (for the message) only when the kernel says they leave no room.
  uid_t uid = getuid();
  if (uid != 0 && getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    b.nproc = static_cast<long long>(rl.rlim_cur);
    if (!nproc_has_room(rl, tasks))  // at least this many, as the kernel counts them
      b.nproc_in_use = std::max(count_user_tasks(uid), b.nproc - tasks + 1);
  }
  long long pid_max = read_number("/proc/sys/kernel/pid_max");
  long long threads_max = read_number("/proc/sys/kernel/threads-max");
  b.pid_max = pid_max < 0 ? threads_max : threads_max < 0 ? pid_max : std::min(pid_max, threads_max);
  // /proc/loadavg: "0.59 0.96 0.48 2/345 12345": 345 tasks on the system.
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    double a, b1, c;
    long long running, total;
    if (std::fscanf(f, "%lf %lf %lf %lld/%lld", &a, &b1, &c, &running, &total) == 5) b.tasks_in_use = total;
    std::fclose(f);
  }
  return b;
}

}  // namespace hvdrun
