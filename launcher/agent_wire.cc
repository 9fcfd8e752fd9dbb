#include "launcher/agent_wire.h"

#include "common/strings.h"

namespace hvdrun::agentwire {
namespace {

void put_u32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

std::string encode(Type type, std::string_view payload) {
  std::string s;
  s.reserve(5 + payload.size());
  put_u32(s, static_cast<uint32_t>(payload.size() + 1));
  s.push_back(static_cast<char>(type));
  s.append(payload);
  return s;
}

std::string encode_output(int rank, int stream, std::string_view lines) {
  std::string p;
  p.reserve(5 + lines.size());
  put_u32(p, static_cast<uint32_t>(rank));
  p.push_back(static_cast<char>(stream));
  p.append(lines);
  return encode(Type::kOutput, p);
}

Status decode_output(std::string_view payload, int* rank, int* stream, std::string_view* lines) {
  if (payload.size() < 5) return make_error(ErrorKind::kMalformed,
                                            "output frame of " + std::to_string(payload.size()) + " bytes");
  *rank = static_cast<int>(get_u32(payload.data()));
  *stream = static_cast<unsigned char>(payload[4]);
  if (*stream > 1) return make_error(ErrorKind::kMalformed, "output frame for stream " + std::to_string(*stream));
  *lines = payload.substr(5);
  return {};
}

std::string encode_signal(int sig) {
  char c = static_cast<char>(sig);
  return encode(Type::kSignal, std::string_view(&c, 1));
}

Result<int> decode_signal(std::string_view payload) {
  if (payload.size() != 1) return make_error(ErrorKind::kMalformed,
                                             "signal frame of " + std::to_string(payload.size()) + " bytes (expected 1)");
  return static_cast<int>(static_cast<unsigned char>(payload[0]));
}

Status FrameReader::feed(std::string_view bytes) {
  buf_.append(bytes);
  size_t pos = 0;
  while (buf_.size() - pos >= 5) {
    uint32_t len = get_u32(buf_.data() + pos);
    auto type = static_cast<uint8_t>(buf_[pos + 4]);
    if (len == 0 || len > kMaxFrame || type < static_cast<uint8_t>(Type::kHello) ||
        type > static_cast<uint8_t>(Type::kEnded)) {
      buf_.erase(0, pos);  // what stuck_at() quotes
      return make_error(ErrorKind::kMalformed,
                        "the agent's stream is not a frame at byte " + std::to_string(framed_) + ": '" + stuck_at() +
                            "'");
    }
    if (buf_.size() - pos - 4 < len) break;
    frames_.push_back({static_cast<Type>(type), buf_.substr(pos + 5, len - 1)});
    pos += 4 + len;
    framed_ += 4 + len;
  }
  buf_.erase(0, pos);
  return {};
}

Status FrameReader::finish() const {
  if (buf_.empty()) return {};
  return make_error(ErrorKind::kMalformed,
                    "the agent's stream ended inside a frame at byte " + std::to_string(framed_) + ": '" +
                        stuck_at() + "'");
}

std::string FrameReader::stuck_at() const { return printable(buf_, 80); }

std::optional<Frame> FrameReader::next() {
  if (frames_.empty()) return std::nullopt;
  Frame f = std::move(frames_.front());
  frames_.pop_front();
  return f;
}

}  // namespace hvdrun::agentwire
