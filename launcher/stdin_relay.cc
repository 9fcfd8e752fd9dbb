#include "launcher/stdin_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace hvdrun {

namespace {
constexpr size_t kChunk = 65536;
}

bool PipeStdinSink::open() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return false;
  rd_.reset(p[0]);
  wr_.reset(p[1]);
  fcntl(wr_.get(), F_SETFL, O_NONBLOCK);
  return true;
}

size_t PipeStdinSink::take(std::string_view data) {
  if (!wr_.valid()) return 0;
  ssize_t r = write(wr_.get(), data.data(), data.size());
  if (r > 0) return static_cast<size_t>(r);
  if (r < 0 && errno != EAGAIN && errno != EINTR) wr_.reset();  // rank 0 closed its stdin
  return 0;
}

std::optional<pollfd> StdinRelay::wants() const {
  if (over_) return std::nullopt;
  if (pending_.empty()) return pollfd{input_, POLLIN, 0};
  if (sink_->room_fd() < 0) return std::nullopt;
  return pollfd{sink_->room_fd(), POLLOUT, 0};
}

void StdinRelay::step(short revents) {
  if (over_) return;
  if (!pending_.empty()) {
    // A sink without an fd is tried at every turn (it wakes the loop when it has room).
    if (sink_->room_fd() < 0 || (revents & (POLLOUT | POLLERR | POLLHUP))) pass_on();
    return;
  }
  if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
  char buf[kChunk];
  ssize_t r = read(input_, buf, sizeof buf);
  if (r > 0) {
    pending_.assign(buf, static_cast<size_t>(r));
    pass_on();
  } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
    finish();
  }
}

void StdinRelay::pass_on() {
  pending_.erase(0, sink_->take(pending_));
  if (sink_->closed()) {
    pending_.clear();
    over_ = true;
  }
}

// The end of the input (or a read error): said to the sink once.
void StdinRelay::finish() {
  over_ = true;
  if (!sink_->closed()) sink_->end();
}

}  // namespace hvdrun
