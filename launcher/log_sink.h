// Routes hvdrun's own log lines (spdlog, from any thread: the rendezvous server logs too)
// through the job's OutputSink, so they queue behind the workers' output and never cut
// into one of their lines. Installed for the duration of a job.
#pragma once

#include <memory>
#include <mutex>
#include <spdlog/sinks/base_sink.h>
#include "common/log.h"

#include "launcher/output_sink.h"

namespace hvdrun {

class NoticeLogSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit NoticeLogSink(OutputSink& out) : out_(out) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    out_.notice(std::string_view(buf.data(), buf.size()));
  }
  void flush_() override {}

 private:
  OutputSink& out_;
};

// Makes the default logger write through `out` until destroyed, then restores the previous one.
class ScopedJobLogger {
 public:
  explicit ScopedJobLogger(OutputSink& out) : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("hvdrun", std::make_shared<NoticeLogSink>(out));
    logger->set_level(previous_->level());
    logger->set_pattern("hvdrun: [%l] %v");
    spdlog::set_default_logger(logger);
  }
  ~ScopedJobLogger() { spdlog::set_default_logger(previous_); }
  ScopedJobLogger(const ScopedJobLogger&) = delete;
  ScopedJobLogger& operator=(const ScopedJobLogger&) = delete;

 private:
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace hvdrun
