// libFuzzer target for the rendezvous frame parser and every message decoder.
// Build: cmake -DHVDRUN_BUILD_FUZZ=ON with clang; run: build/tests/frame_fuzzer -max_total_time=30
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rendezvous/protocol.h"

using namespace hvdrun::rdv;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (in.size() >= kHeaderBytes) {
    (void)decode_length(in.data(), kMaxFrameBeforeAuth);
    (void)decode_length(in.data(), kMaxFrame);
  }
  auto f = decode_body(in);
  std::string_view payload = f ? std::string_view(f->payload) : in;
  (void)decode_register(payload);
  (void)decode_registered(payload);
  (void)decode_peer(payload);
  (void)decode_key_value(payload);
  (void)decode_wait(payload);
  (void)decode_add(payload);
  (void)decode_string(payload);
  (void)decode_i64(payload);
  (void)decode_keys(payload);
  (void)decode_barrier(payload);
  return 0;
}
