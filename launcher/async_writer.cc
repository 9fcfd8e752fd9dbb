#include "launcher/async_writer.h"

#include <unistd.h>

#include <cerrno>

#include "common/socket_io.h"

namespace hvdrun {

AsyncWriter::AsyncWriter(int fd) : fd_(fd) {}

AsyncWriter::AsyncWriter(UniqueFd owned) : fd_(owned.get()), owned_(std::move(owned)) {}

AsyncWriter::~AsyncWriter() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncWriter::write(std::string data) {
  if (data.empty()) return;
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] {
      return failed_ || closing_ || stop_ || queued_bytes_ == 0 || queued_bytes_ + data.size() <= capacity_;
    });
    if (failed_ || closing_) return;
    queued_bytes_ += data.size();
    queue_.push_back(std::move(data));
    // The thread starts with the first output: a silent job never pays for it.
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] { run(); });
      if (detach_) thread_.detach();
    }
  }
  cv_.notify_all();
}

void AsyncWriter::set_capacity(size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  capacity_ = bytes;
}

size_t AsyncWriter::backlog() const {
  std::lock_guard<std::mutex> lk(mu_);
  return queued_bytes_;
}

void AsyncWriter::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return (queue_.empty() && !busy_) || failed_; });
}

void AsyncWriter::close_after_queued() {
  std::lock_guard<std::mutex> lk(mu_);
  closing_ = true;
  if (!started_) owned_.reset();  // nothing was ever queued: no thread to do it
  cv_.notify_all();
}

void AsyncWriter::detach_thread() {
  std::lock_guard<std::mutex> lk(mu_);
  detach_ = true;
}

void AsyncWriter::on_failure(std::function<void(int err)> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  on_failure_ = std::move(fn);
}

void AsyncWriter::on_done(std::function<void(size_t bytes, bool failed)> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  on_done_ = std::move(fn);
}

void AsyncWriter::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [this] { return stop_ || closing_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (closing_) owned_.reset();  // everything is written: the reader sees EOF
      if (stop_ || closing_) return;
      continue;
    }
    // Take everything queued and write it in one go, outside the lock.
    std::string batch;
    if (queue_.size() == 1) {
      batch = std::move(queue_.front());
    } else {
      batch.reserve(queued_bytes_);
      for (auto& s : queue_) batch.append(s);
    }
    queue_.clear();
    busy_ = true;
    lk.unlock();
    Status st = write_all(fd_, batch);
    lk.lock();
    busy_ = false;
    queued_bytes_ -= batch.size();
    size_t done = batch.size();
    if (!st) {
      failed_ = true;
      done += queued_bytes_;
      queue_.clear();
      queued_bytes_ = 0;
      if (on_failure_) on_failure_(st.error().sys_errno);
    }
    cv_.notify_all();
    if (on_done_) {
      auto fn = on_done_;
      bool failed = !st;
      lk.unlock();
      fn(done, failed);
      lk.lock();
    }
  }
}

}  // namespace hvdrun
