// libFuzzer target: the hvdrun <-> agent stream (agent_wire frames, fed in pieces) and every
// message they carry (job, hello with its host facts, ready, attach, setup error, failed,
// exited, Slurm signal, stdin taken, done, output, signal). What a decoder takes, its encoder writes back and the
// decoder reads again as the same message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"

using namespace hvdrun;

namespace {

// decode(encode(decode(payload))) == decode(payload), for a message that decoded.
template <class T, class Dec, class Enc, class Same>
void round_trip(const std::string& payload, Dec dec, Enc enc, Same same) {
  Result<T> a = dec(payload);
  if (!a) return;
  Result<T> b = dec(enc(*a));
  if (!b || !same(*a, *b)) __builtin_trap();
}

void decode_reports(const std::string& p) {
  (void)decode_job(p);
  round_trip<AgentHello>(p, decode_hello, encode_hello, [](const auto& a, const auto& b) { return a.facts == b.facts; });
  round_trip<AgentReady>(p, decode_ready, encode_ready,
                         [](const auto& a, const auto& b) { return a.has_python == b.has_python && a.python == b.python; });
  (void)decode_attach(p);
  round_trip<AgentSetupError>(p, decode_setup_error, encode_setup_error, [](const auto& a, const auto& b) {
    return a.message == b.message && a.code == b.code && a.kind == b.kind;
  });
  round_trip<AgentFailed>(p, decode_failed, encode_failed,
                          [](const auto& a, const auto& b) { return a.rank == b.rank && a.status == b.status; });
  round_trip<AgentExited>(p, decode_exited, encode_exited, [](const auto& a, const auto& b) { return a.rank == b.rank; });
  round_trip<AgentSlurmSignal>(p, decode_slurm_signal, encode_slurm_signal,
                               [](const auto& a, const auto& b) { return a.signal == b.signal; });
  round_trip<AgentStdinTaken>(p, decode_stdin_taken, encode_stdin_taken,
                              [](const auto& a, const auto& b) { return a.closed == b.closed && a.bytes == b.bytes; });
  round_trip<AgentDone>(p, decode_done, encode_done, [](const auto& a, const auto& b) {
    return a.code == b.code && (a.lost_contact_s > 0 ? a.lost_contact_s : 0) == b.lost_contact_s;
  });
  round_trip<AgentSpawn>(p, decode_spawn, encode_spawn,
                         [](const auto& a, const auto& b) { return a.id == b.id && a.argv == b.argv && a.env == b.env; });
  round_trip<AgentKill>(p, decode_kill, encode_kill,
                        [](const auto& a, const auto& b) { return a.id == b.id && a.signal == b.signal; });
  round_trip<AgentEnded>(p, decode_ended, encode_ended,
                         [](const auto& a, const auto& b) { return a.id == b.id && a.status == b.status; });
}

void decode_frame(const agentwire::Frame& f) {
  using agentwire::Type;
  if (f.type == Type::kOutput) {
    int rank, stream;
    std::string_view lines;
    if (agentwire::decode_output(f.payload, &rank, &stream, &lines)) {
      std::string again = agentwire::encode_output(rank, stream, lines);
      if (again.substr(5) != f.payload) __builtin_trap();
    }
  } else if (f.type == Type::kSignal) {
    if (auto sig = agentwire::decode_signal(f.payload); sig && agentwire::encode_signal(*sig).substr(5) != f.payload)
      __builtin_trap();
  } else {
    decode_reports(f.payload);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // The first byte chooses how the stream is cut into reads.
  size_t step = in.empty() ? 1 : static_cast<size_t>(static_cast<uint8_t>(in[0]) % 17) + 1;
  agentwire::FrameReader reader;
  for (size_t off = 0; off < in.size(); off += step) {
    if (!reader.feed(in.substr(off, step))) {
      if (reader.stuck_at().size() > 80 + 3) __builtin_trap();  // 80 bytes at most, and "..."
      break;
    }
    while (auto f = reader.next()) decode_frame(*f);
  }
  (void)reader.finish();
  // Every decoder on the raw input too (a corpus of messages finds their corners).
  decode_reports(std::string(in));
  return 0;
}
