// libFuzzer target: the hvdrun <-> agent stream (agent_wire frames, fed in pieces) and the
// JSON messages they carry (job, hello, attach, output).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "launcher/agent_messages.h"
#include "launcher/agent_wire.h"

using namespace hvdrun;

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
    while (auto f = reader.next()) {
      int rank, stream;
      std::string_view lines;
      switch (f->type) {
        case agentwire::Type::kOutput: (void)agentwire::decode_output(f->payload, &rank, &stream, &lines); break;
        case agentwire::Type::kJob: (void)decode_job(f->payload); break;
        case agentwire::Type::kHello: (void)decode_hello(f->payload); break;
        case agentwire::Type::kAttach: (void)decode_attach(f->payload); break;
        default: break;
      }
    }
  }
  (void)reader.finish();
  // The JSON decoders on the raw input too (a corpus of messages finds their corners).
  std::string json(in);
  (void)decode_job(json);
  (void)decode_hello(json);
  (void)decode_attach(json);
  return 0;
}
