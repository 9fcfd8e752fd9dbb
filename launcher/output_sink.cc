#include "launcher/output_sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "launcher/exit_status.h"
#include "common/socket_io.h"
#include "launcher/line_splitter.h"

namespace hvdrun {
namespace {

constexpr size_t kHighWater = 64u << 20;

}  // namespace

std::string tag_line_prefix(int rank, StreamKind stream, bool timestamps) {
  std::string out;
  if (timestamps) {
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[64];
    size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf + n, sizeof buf - n, ".%03d ", ms);
    out = buf;
  }
  out += "[" + std::to_string(rank) + "]";
  out += stream == StreamKind::kStdout ? "<stdout>:" : "<stderr>:";
  return out;
}

TaggedOutput::TaggedOutput(const TaggedOutputOptions& opts)
    : opts_(opts), out_(opts.stdout_fd), err_(opts.stderr_fd) {}

Result<std::unique_ptr<TaggedOutput>> TaggedOutput::create(const TaggedOutputOptions& opts,
                                                           const std::vector<int>& ranks) {
  std::unique_ptr<TaggedOutput> sink(new TaggedOutput(opts));
  if (opts.output_dir.empty()) return sink;
  int width = static_cast<int>(std::to_string(std::max(opts.size - 1, 0)).size());
  for (int r : ranks) {
    std::string num = std::to_string(r);
    num.insert(0, static_cast<size_t>(std::max(0, width - static_cast<int>(num.size()))), '0');
    std::filesystem::path dir = std::filesystem::path(opts.output_dir) / ("rank." + num);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return error_of(ErrorKind::kUsage, "--output-filename '" + opts.output_dir + "': cannot create " + dir.string() + ": " +
                                  ec.message());
    std::array<UniqueFd, 2> fds;
    std::array<std::string, 2> paths;
    const char* names[2] = {"stdout", "stderr"};
    for (int i = 0; i < 2; ++i) {
      std::string path = (dir / names[i]).string();
      paths[i] = path;
      fds[i].reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!fds[i].valid())
        return error_of(ErrorKind::kUsage, "--output-filename '" + opts.output_dir + "': cannot open " + path + ": " +
                              std::strerror(errno));
    }
    sink->files_.emplace(r, std::move(fds));
    sink->paths_.emplace(r, std::move(paths));
  }
  return sink;
}

void TaggedOutput::write_lines(int rank, StreamKind stream, std::string_view lines) {
  if (lines.empty()) return;
  std::string prefix = tag_line_prefix(rank, stream, opts_.timestamps);
  std::string tagged;
  tagged.reserve(lines.size() + 64);
  for_each_line(lines, [&](std::string_view line) {
    tagged.append(prefix);
    tagged.append(line);
  });
  (stream == StreamKind::kStdout ? out_ : err_).write(std::move(tagged));
  auto it = files_.find(rank);
  if (it == files_.end()) return;
  std::function<void(std::string)> report;
  std::string message;
  {
    std::lock_guard<std::mutex> lk(file_failure_mu_);
    if (file_failed_) return;
    int i = static_cast<int>(stream);
    Status st = write_all(it->second[i].get(), lines);
    if (st) return;
    // A full disk (or any failed write) must not pass silently: the job ends with
    // "output failed" (exit 7), as the man page's EXIT STATUS says.
    file_failed_ = true;
    message = "hvdrun: --output-filename: cannot write " + paths_[rank][i] + ": " + st.error().message +
              "; the job's output is incomplete";
    report = on_file_failure_;
  }
  if (report) report(std::move(message));
}

void TaggedOutput::on_file_failure(std::function<void(std::string message)> fn) {
  std::lock_guard<std::mutex> lk(file_failure_mu_);
  on_file_failure_ = std::move(fn);
}

bool TaggedOutput::congested() const { return out_.backlog() + err_.backlog() > kHighWater; }

void TaggedOutput::notice(std::string_view line) {
  std::string s(line);
  if (s.empty() || s.back() != '\n') s.push_back('\n');
  err_.write(std::move(s));
}

void TaggedOutput::on_reader_gone(std::function<void()> fn) {
  for (AsyncWriter* w : {&out_, &err_}) {
    if (!fn) {
      w->on_failure(nullptr);
      continue;
    }
    w->on_failure([fn](int err) {
      if (err == EPIPE) fn();
    });
  }
}

void TaggedOutput::drain() {
  out_.drain();
  err_.drain();
}

}  // namespace hvdrun
