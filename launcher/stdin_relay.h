// hvdrun's stdin to rank 0, wherever rank 0 runs: one relay, driven by the agent's poll
// loop. It reads its input only when the loop's poll says it is readable and nothing is
// pending (a backgrounded hvdrun reading its terminal is stopped by SIGTTIN then, instead
// of stealing a line typed for the shell), holds at most one chunk, and hands it to a sink:
// rank 0's pipe here (PipeStdinSink) or a remote host's stdin queue (RemoteHost). Nothing
// reads hvdrun's stdin once the loop is over.
#pragma once

#include <poll.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/unique_fd.h"

namespace hvdrun {

// Where the relay puts what it reads. Never blocks.
class StdinSink {
 public:
  virtual ~StdinSink() = default;
  // Takes a prefix of `data` (0 bytes: no room now). A sink that will take nothing more
  // says so with closed().
  virtual size_t take(std::string_view data) = 0;
  // The input ended: called once, and nothing is taken after it.
  virtual void end() = 0;
  // Takes nothing more (rank 0 closed its stdin): the relay stops.
  virtual bool closed() const = 0;
  // An fd that polls writable when take() has room again; -1: the sink wakes the loop
  // itself (the agent's wake()) when it has.
  virtual int room_fd() const = 0;
};

// Rank 0's stdin as a pipe: what it reads, and our non-blocking write end.
class PipeStdinSink : public StdinSink {
 public:
  // False when the pipe could not be made.
  bool open();
  int read_end() const { return rd_.get(); }
  void close_read_end() { rd_.reset(); }  // once rank 0 holds its own copy
  size_t take(std::string_view data) override;
  void end() override { wr_.reset(); }
  bool closed() const override { return !wr_.valid(); }
  int room_fd() const override { return wr_.get(); }

 private:
  UniqueFd rd_, wr_;
};

class StdinRelay {
 public:
  // `input`: hvdrun's stdin (0), not owned; `sink` outlives the relay.
  StdinRelay(int input, StdinSink& sink) : input_(input), sink_(&sink) {}
  // What this turn's poll waits on for the relay: the input's POLLIN when nothing is
  // pending, the sink's room fd's POLLOUT when a chunk is; none when over or when the
  // sink wakes the loop itself.
  std::optional<pollfd> wants() const;
  // After the poll: `revents` of the pollfd from wants() (0 when none was polled). Reads
  // one chunk, or passes the pending one on.
  void step(short revents);
  bool over() const { return over_; }
  size_t pending() const { return pending_.size(); }

 private:
  void pass_on();
  void finish();
  int input_;
  StdinSink* sink_;
  std::string pending_;  // read, not yet taken
  bool over_ = false;
};

}  // namespace hvdrun
