#include "launcher/timeline_merge.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/socket_io.h"
#include "common/unique_fd.h"
#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

constexpr size_t kChunk = 1u << 20;     // read and written at a time; signals are looked at in between
constexpr size_t kMaxLine = 1u << 20;   // a longer line is no event of libhvdrun's: dropped

std::string rank_path(const std::string& file, int rank) { return file + ".rank" + std::to_string(rank); }

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string what_is(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// A line of a rank's file that is a whole event, without its comma; false for the rest.
bool event_line(std::string& line) {
  if (!line.empty() && line.back() == ',') line.pop_back();
  if (line.empty() || line.front() != '{') return false;
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && j.is_object();  // (a line cut short by a kill is neither)
}

// One rank's file, as found when the merge began.
struct RankFile {
  int rank = 0;
  std::string path;
  struct stat st {};
};

// Opens rank r's file if it is one (never blocking, never through a link), filling f.st:
// absent (ENOENT) is no file and no error; anything else that is not a regular file is
// named in *problem and left alone.
UniqueFd open_rank_file(RankFile& f, std::string* problem) {
  UniqueFd fd(::open(f.path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    int e = errno;
    struct stat l {};
    if (e != ENOENT)
      *problem = f.path + (e == ELOOP && ::lstat(f.path.c_str(), &l) == 0 ? " is " + what_is(l.st_mode)
                                                                       : ": " + std::string(std::strerror(e)));
    return fd;
  }
  if (::fstat(fd.get(), &f.st) != 0 || !S_ISREG(f.st.st_mode)) {
    *problem = f.path + " is " + what_is(f.st.st_mode);
    fd.reset();
  }
  return fd;
}

// Whether the file begins as libhvdrun's file of rank r does ("[", then its process_name
// event), or as a part of that (a rank killed at its first write).
bool begins_as_rank_file(int fd, const RankFile& f) {
  const std::string head = "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(f.rank) + ",";
  std::string got(std::min<size_t>(head.size(), static_cast<size_t>(f.st.st_size)), '\0');
  ssize_t n = ::pread(fd, got.data(), got.size(), 0);
  return n == static_cast<ssize_t>(got.size()) && head.compare(0, got.size(), got) == 0;
}

// The rank files to merge: those that are this job's ranks' (closed again: a large job's
// files are opened one at a time); the others named in *problems.
std::vector<RankFile> find_rank_files(const std::string& file, int ranks, std::vector<std::string>* problems) {
  std::vector<RankFile> found;
  for (int r = 0; r < ranks; ++r) {
    RankFile f{r, rank_path(file, r), {}};
    std::string problem;
    UniqueFd fd = open_rank_file(f, &problem);
    if (fd.valid() && !begins_as_rank_file(fd.get(), f))
      problem = f.path + " is not a timeline of rank " + std::to_string(r);
    if (!problem.empty()) problems->push_back(problem + " (left as it is)");
    else if (fd.valid()) found.push_back(std::move(f));
  }
  return found;
}

// Streams the events of one rank's file (up to its size when found) into `out`, flushing
// it to `out_fd` every chunk; a signal from `interrupted` stops it (kInterrupted, 128+N).
Status copy_events(const RankFile& f, int out_fd, std::string& out, size_t* events,
                   const std::function<int()>& interrupted) {
  RankFile now = f;
  std::string problem;
  UniqueFd fd = open_rank_file(now, &problem);
  if (!fd.valid() || now.st.st_dev != f.st.st_dev || now.st.st_ino != f.st.st_ino)
    return make_error(ErrorKind::kOutputFailed, f.path + " was replaced during the merge");
  std::string carry, buf(kChunk, '\0');
  bool too_long = false;
  auto take = [&](std::string& line) {
    if (too_long || !event_line(line)) return;
    out += *events ? ",\n" : "";
    out += line;
    ++*events;
  };
  for (off_t left = f.st.st_size; left > 0;) {
    if (int sig = interrupted()) return rank_error(ErrorKind::kInterrupted, signal_name(sig), 128 + sig);
    ssize_t n = ::pread(fd.get(), buf.data(), std::min<size_t>(buf.size(), static_cast<size_t>(left)),
                        f.st.st_size - left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(ErrorKind::kOutputFailed, "cannot read " + f.path + ": " + std::strerror(errno));
    if (n == 0) break;  // (shrunk since)
    left -= n;
    for (size_t at = 0; at < static_cast<size_t>(n);) {
      const char* nl = static_cast<const char*>(std::memchr(buf.data() + at, '\n', static_cast<size_t>(n) - at));
      size_t end = nl ? static_cast<size_t>(nl - buf.data()) : static_cast<size_t>(n);
      if (!too_long) carry.append(buf, at, end - at);
      if (carry.size() > kMaxLine) {
        too_long = true;
        carry.clear();
      }
      at = end + 1;
      if (!nl) break;
      take(carry);
      too_long = false;
      carry.clear();
    }
    if (out.size() >= kChunk) {
      if (auto st = write_all(out_fd, out); !st) return st;
      out.clear();
    }
  }
  take(carry);  // a last line without its newline (whole, or cut short and dropped)
  return {};
}

// The merge's temporary file next to FILE: removed unless released by the rename.
struct TempFile {
  std::string path;
  UniqueFd fd;
  bool keep = false;
  ~TempFile() {
    if (!fd.valid() || keep) return;
    struct stat a {}, b {};
    // Only the file made here (the name could have been replaced meanwhile).
    if (::fstat(fd.get(), &a) == 0 && ::lstat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      ::unlink(path.c_str());
  }
};

// Writes the events of `inputs` to a temporary next to FILE and renames it over FILE; on
// any failure the temporary is removed and the error says the ranks' files are left.
Status write_merged(const std::string& file, const std::vector<RankFile>& inputs,
                    const std::function<int()>& interrupted) {
  const std::string kept = "; the ranks' files are left as they are (" + rank_path(file, inputs[0].rank) + ", ...)";
  auto failed = [&](const std::string& why) {
    return make_error(ErrorKind::kOutputFailed, "cannot write the timeline " + file + ": " + why + kept);
  };
  TempFile tmp;
  std::string templ = file + ".tmp.XXXXXX";
  tmp.fd.reset(::mkostemp(templ.data(), O_CLOEXEC));
  if (!tmp.fd.valid()) return failed("cannot create " + templ + ": " + std::strerror(errno));
  tmp.path = templ;
  std::string out = "[\n";
  size_t events = 0;
  for (const auto& f : inputs) {
    auto st = copy_events(f, tmp.fd.get(), out, &events, interrupted);
    if (!st && st.error().kind == ErrorKind::kInterrupted)
      return rank_error(ErrorKind::kInterrupted,
                        "received " + st.error().message + " while merging the timeline: " + file + " not written" + kept,
                        st.error().exit_code);
    if (!st) return failed(st.error().message);
  }
  out += "\n]\n";
  if (auto st = write_all(tmp.fd.get(), out); !st) return failed(st.error().message);
  mode_t mask = ::umask(0);  // (mkstemp's 0600: the trace gets what a new file would)
  ::umask(mask);
  if (::fchmod(tmp.fd.get(), 0666 & ~mask) != 0 || ::fsync(tmp.fd.get()) != 0) return failed(std::strerror(errno));
  struct stat now {};
  if (::lstat(file.c_str(), &now) == 0 && !S_ISREG(now.st_mode))
    return failed("it is " + what_is(now.st_mode) + " now: not replaced");
  if (::rename(tmp.path.c_str(), file.c_str()) != 0) return failed(std::strerror(errno));
  tmp.keep = true;
  return {};
}

}  // namespace

std::string merge_timelines(const std::vector<std::string>& rank_files, size_t* events) {
  std::string out = "[\n";
  size_t n = 0;
  for (const auto& text : rank_files) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (!event_line(line)) continue;
      out += n ? ",\n" : "";
      out += line;
      ++n;
    }
  }
  out += "\n]\n";
  if (events) *events = n;
  return out;
}

Status check_timeline_path(const std::string& file, int ranks, const std::string& origin) {
  auto bad = [&](const std::string& why) { return error_of(ErrorKind::kUsage, origin + " '" + file + "': " + why); };
  struct stat st {};
  if (::lstat(file.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return bad("is " + what_is(st.st_mode) + "; expected a regular file (replaced) or a new file");
  } else if (errno != ENOENT) {
    return bad(std::strerror(errno));
  } else {
    std::string dir = std::filesystem::path(file).parent_path().string();
    if (dir.empty()) dir = ".";
    if (::stat(dir.c_str(), &st) != 0) return bad("its directory " + dir + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bad("its directory " + dir + " is " + what_is(st.st_mode));
  }
  for (int r = 0; r < ranks; ++r) {
    std::string p = rank_path(file, r);
    if (::lstat(p.c_str(), &st) == 0)
      return bad(p + (S_ISREG(st.st_mode) ? " exists already (an earlier job's?)" : " is " + what_is(st.st_mode)) +
                 ": hvdrun neither overwrites nor merges it; remove it, or choose another timeline file");
  }
  return {};
}

int take_pending_interrupt() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  timespec zero{0, 0};
  int sig = ::sigtimedwait(&set, nullptr, &zero);
  return sig > 0 ? sig : 0;
}

Status merge_timeline_files(const std::string& file, int ranks, const std::function<int()>& interrupted) {
  std::vector<std::string> problems;
  std::vector<RankFile> inputs = find_rank_files(file, ranks, &problems);
  if (!inputs.empty()) {
    if (auto st = write_merged(file, inputs, interrupted); !st) return st;
    for (auto& f : inputs) {  // removed only if they are still the files merged
      struct stat l {};
      if (::lstat(f.path.c_str(), &l) == 0 && l.st_dev == f.st.st_dev && l.st_ino == f.st.st_ino)
        ::unlink(f.path.c_str());
    }
  }
  if (problems.empty()) return {};  // (nothing at all: no rank wrote one, a job without libhvdrun)
  std::string msg = "the timeline " + file + (inputs.empty() ? " was not written" : " is incomplete") + ": ";
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  return make_error(ErrorKind::kOutputFailed, msg);
}

}  // namespace hvdrun
