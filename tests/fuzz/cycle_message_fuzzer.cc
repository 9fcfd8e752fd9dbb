// libFuzzer target for the engine's cycle message decoder (collectives/engine/
// cycle_message.h): it reads what peers send. A message that decodes re-encodes to one that
// decodes to the same fields, and its eager data lies inside the input.
// Build: cmake -DHVDRUN_BUILD_FUZZ=ON with clang; run: build/tests/cycle_message_fuzzer -max_total_time=30
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "collectives/engine/cycle_message.h"

using namespace hvdrun;

namespace {

// The message as bytes: compared so, NaN scales (which compare unequal) round-trip too.
std::string bytes_of(const CycleMessage& m) {
  std::string out;
  encode_header(m, static_cast<uint32_t>(m.eager.size()), &out);
  return out.append(m.eager.data(), m.eager.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  CycleMessage m;
  if (!decode_message(in, 0, &m)) return 0;
  unsigned sum = 0;  // every eager byte is read: ASan checks that it lies in the input
  for (char c : m.eager) sum += static_cast<unsigned char>(c);
  (void)sum;
  std::string again;
  encode_header(m, static_cast<uint32_t>(m.eager.size()), &again);
  again.resize(eager_start(again.size()), '\0');
  again.append(m.eager.data(), m.eager.size());
  CycleMessage back;
  if (!decode_message(again, 0, &back) || bytes_of(m) != bytes_of(back)) std::abort();
  return 0;
}
