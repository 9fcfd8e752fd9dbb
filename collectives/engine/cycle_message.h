// One rank's part of a negotiation cycle, and its wire format (little-endian):
//
//   flags (joined, leaving) | bit vector of pending cached requests | names whose cached
//   response is invalid | full specs of the requests not announced before | length of the
//   eager data, then (8-byte aligned in the message) the eager data itself
//
// The decoder reads what peers send: it checks every length against the message and
// never trusts a count (tests/fuzz/cycle_message_fuzzer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/engine/spec.h"

namespace hvdrun {

constexpr uint8_t kFlagJoined = 1, kFlagLeaving = 2;

struct CycleMessage {
  uint8_t flags = 0;
  std::vector<uint64_t> bits;  // cache ids of this rank's pending cached requests
  std::vector<std::string> invalid;
  std::vector<Spec> specs;
  // The data of small host allreduces, cached ones (EagerLayout) then those announced in
  // full (place_eager), in place in the received message, 8-byte aligned within it (the
  // message's own buffer is malloc-aligned).
  std::string_view eager;
};

// Appends m's header (everything but the eager data, whose length is `eager_bytes`) to *out.
void encode_header(const CycleMessage& m, uint32_t eager_bytes, std::string* out);
// Where the eager data starts in a message whose header ends at `header_end`.
inline size_t eager_start(size_t header_end) { return (header_end + 7) / 8 * 8; }
// Decodes the message that starts at raw[offset] and runs to raw's end into *m (its vectors
// keep their capacity; m->eager points into raw). False when it is malformed: truncated,
// followed by other bytes, naming one request twice, or a group's dtypes or shapes not one per tensor.
bool decode_message(const std::string& raw, size_t offset, CycleMessage* m);
// Whether bit `i` of a bit vector is set.
inline bool bit(const std::vector<uint64_t>& v, size_t i) { return i / 64 < v.size() && (v[i / 64] >> (i % 64)) & 1; }
// Sets bit `i`, growing the vector as needed.
inline void set_bit(std::vector<uint64_t>* v, size_t i) {
  if (v->size() <= i / 64) v->resize(i / 64 + 1, 0);
  (*v)[i / 64] |= uint64_t{1} << (i % 64);
}

}  // namespace hvdrun
