#include "collectives/timeline.h"

#include <fcntl.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "hvdrun/hvdrun.h"

namespace hvdrun {
namespace {

long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o;
}

}  // namespace

std::string Timeline::rank_path(const std::string& path, int rank) { return path + ".rank" + std::to_string(rank); }

Result<std::unique_ptr<Timeline>> Timeline::open(const std::string& path, int rank, const std::string& host,
                                                 bool mark_cycles) {
  std::string p = rank_path(path, rank);
  std::string who = "rank " + std::to_string(rank) + ": ";
  // Created here, never opened: whatever is at the path already (a symbolic link, a FIFO,
  // an earlier job's file) is neither followed nor overwritten.
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST)
    return make_error(ErrorKind::kInvalidArgument,
                      who + "the timeline file " + p + " exists already (an earlier job's?): hvdrun does not overwrite it; "
                          "remove it or choose another timeline file");
  if (fd < 0)
    return make_sys_error(ErrorKind::kInvalidArgument,
                          who + "cannot create the timeline file " + p + ": " + std::strerror(errno), errno);
  FILE* f = ::fdopen(fd, "w");
  if (!f) {
    ::close(fd);
    return make_sys_error(ErrorKind::kInvalidArgument,
                          who + "cannot write the timeline file " + p + ": " + std::strerror(errno), errno);
  }
  std::unique_ptr<Timeline> t(new Timeline(f, p, rank, mark_cycles));
  std::lock_guard<std::mutex> lk(t->mu_);
  t->write("[\n");
  t->line("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank) +
          ",\"args\":{\"name\":\"rank " + std::to_string(rank) + " (" + json_escape(host) + ")\"}}");
  t->line("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(rank) +
          ",\"args\":{\"sort_index\":" + std::to_string(rank) + "}}");
  return t;
}

Timeline::~Timeline() {
  if (f_) std::fclose(f_);
}

void Timeline::write(const std::string& text) {
  if (failed_) return;
  if (std::fputs(text.c_str(), f_) >= 0 && std::fflush(f_) == 0) return;
  // A full disk: one line, and the file stops here (the job goes on, as Horovod's does;
  // hvdrun's merge then finds it cut short).
  failed_ = true;
  std::fprintf(stderr, "hvdrun: rank %d: cannot write the timeline file %s: %s; its timeline stops here\n", rank_,
               path_.c_str(), std::strerror(errno));
}

void Timeline::drop_buffered_in_child() { __fpurge(f_); }

void Timeline::line(const std::string& json) { write(json + ",\n"); }

int Timeline::tid_of(const std::string& tensor) {
  auto it = open_.find(tensor);
  if (it != open_.end()) return it->second.first;
  int tid = next_tid_++;
  open_[tensor] = {tid, ""};
  line("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(tid) +
       ",\"args\":{\"name\":\"" + json_escape(tensor) + "\"}}");
  return tid;
}

void Timeline::phase(const std::string& tensor, const std::string& phase) {
  std::lock_guard<std::mutex> lk(mu_);
  int tid = tid_of(tensor);
  auto& cur = open_[tensor].second;
  long long ts = now_us();
  std::string where = ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(tid) +
                      ",\"ts\":" + std::to_string(ts) + "}";
  if (!cur.empty()) line("{\"name\":\"" + json_escape(cur) + "\",\"ph\":\"E\"" + where);
  cur = phase;
  line("{\"name\":\"" + json_escape(phase) + "\",\"ph\":\"B\"" + where);
}

void Timeline::done(const std::string& tensor) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = open_.find(tensor);
  if (it == open_.end() || it->second.second.empty()) return;
  line("{\"name\":\"" + json_escape(it->second.second) + "\",\"ph\":\"E\",\"pid\":" + std::to_string(rank_) +
       ",\"tid\":" + std::to_string(it->second.first) + ",\"ts\":" + std::to_string(now_us()) + "}");
  it->second.second.clear();
}

void Timeline::instant(const std::string& what) {
  std::lock_guard<std::mutex> lk(mu_);
  line("{\"name\":\"" + json_escape(what) + "\",\"ph\":\"i\",\"s\":\"p\",\"pid\":" + std::to_string(rank_) +
       ",\"tid\":0,\"ts\":" + std::to_string(now_us()) + "}");
}

}  // namespace hvdrun
