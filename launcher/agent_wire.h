// The stream between hvdrun and its agent on a remote host (the agent's stdin and stdout
// through SSH or a launch command, or a TCP connection the agent made back to hvdrun when
// srun started it): frames of u32 length (big-endian, counting type and payload) | u8 type
// | payload. Every JSON payload is a type in agent_messages.h with its encoder and decoder
// (fuzzed: tests/fuzz/agent_wire_fuzzer.cc); kOutput and kSignal are binary (below).
//
//   agent -> hvdrun: kAttach (only on a connection it dialed, first: the job's token, its
//                    task and node), kHello (JSON: its node, network stack, addresses and host facts),
//                    kReady (JSON: the Python facts of a Python command, or empty),
//                    kSetupError (JSON: message, code, kind), kOutput (i32 rank | u8 stream |
//                    whole lines), kFailed (JSON: rank, wait status), kDone (JSON: code,
//                    lost_contact_s), kExited (JSON: rank), kSlurmSignal (JSON: signal),
//                    kStdinTaken (JSON: bytes of kStdin written to rank 0, or closed),
//                    kPythonFacts (JSON as kReady's, when the job asked for them then),
//                    kEnded (JSON: an elastic worker's id and wait status)
//   hvdrun -> agent: kJob (JSON: cwd, kill grace, heartbeat time-out, one entry per rank
//                    with argv and env), kStart, kSignal (u8 signal), kStdin (bytes for
//                    rank 0; empty: end of input), kSpawn and kKill (JSON: an elastic
//                    job's worker to start, a signal to its group)
//   both ways:       kHeartbeat, every kHeartbeatInterval once the job runs: a side that
//                    hears nothing for the time-out takes the other for gone (a network
//                    partition sends no FIN)
//
// Closing hvdrun's side (EOF on the agent's stream) ends the workers on that host. The job
// description, environment and secret travel only here, never on a command line.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hvdrun::agentwire {

enum class Type : uint8_t {
  kHello = 1,
  kJob = 2,
  kReady = 3,
  kSetupError = 4,
  kStart = 5,
  kOutput = 6,
  kFailed = 7,
  kDone = 8,
  kSignal = 9,
  kHeartbeat = 10,
  kStdin = 11,
  kAttach = 12,  // agent -> hvdrun, first on a connection the agent dialed (JSON: token, task, node)
  kExited = 13,  // agent -> hvdrun: a rank exited with code 0 (JSON: rank), for the blame
  // agent -> hvdrun: bytes of kStdin that left the agent for rank 0's stdin (JSON: bytes), or
  // (JSON: closed) rank 0's stdin is closed and takes nothing more. hvdrun keeps at most
  // kStdinWindow bytes sent and not yet taken: a rank 0 that does not read its stdin holds
  // hvdrun's stdin there, not in the agent's memory.
  kStdinTaken = 14,
  // agent -> hvdrun: Slurm signalled the agent's step (JSON: signal): the job was cancelled
  // or reached its time limit. hvdrun says so, once for the job, whichever host heard it.
  kSlurmSignal = 15,
  // agent -> hvdrun, only when its kJob asked (python_facts_after_start): the Python facts
  // (as kReady's JSON), once the probe answered, after kStart and before kDone.
  kPythonFacts = 16,
  // An elastic job (AgentJob::elastic; agent_messages.h): hvdrun -> agent kSpawn (JSON: id,
  // argv, env) and kKill (JSON: id, signal); agent -> hvdrun kEnded (JSON: id, wait status).
  kSpawn = 17,
  kKill = 18,
  kEnded = 19,
};

inline constexpr double kHeartbeatInterval = 2.0;  // seconds
inline constexpr size_t kStdinWindow = 4u << 20;  // bytes of stdin in flight to an agent

inline constexpr uint32_t kMaxFrame = 64u << 20;
// The agent protocol's version, in every hello (HostFacts::protocol): hvdrun and an agent
// of another version talk when theirs are equal. Raise it with any change to a frame or a
// message that the other side would misread.
inline constexpr int kProtocol = 2;  // 2: the elastic frames

struct Frame {
  Type type;
  std::string payload;
};

std::string encode(Type type, std::string_view payload);
std::string encode_output(int rank, int stream, std::string_view lines);
Status decode_output(std::string_view payload, int* rank, int* stream, std::string_view* lines);
// kSignal: one byte, the signal's number.
std::string encode_signal(int sig);
Result<int> decode_signal(std::string_view payload);

// Accumulates bytes; yields whole frames in order. Bytes that cannot start a frame (a
// length of 0 or over kMaxFrame, an unknown type) are an error that quotes them.
class FrameReader {
 public:
  Status feed(std::string_view bytes);
  // At the end of the stream: an error when it ended inside a frame, quoting what was left.
  Status finish() const;
  std::optional<Frame> next();  // the oldest whole frame not yet taken
  // Whether a whole frame has come: bytes that are no frame before the first one are text
  // that something printed before the agent started (a launcher's greeting, a login banner,
  // a ~/.bashrc that echoes).
  bool any_frame() const { return framed_ > 0; }
  // Where reading stopped: the first bytes not taken as a frame, at most 80, printably
  // escaped (a bare newline reads \x0a).
  std::string stuck_at() const;

 private:
  std::string buf_;
  std::deque<Frame> frames_;
  uint64_t framed_ = 0;  // bytes of whole frames read
};

}  // namespace hvdrun::agentwire
