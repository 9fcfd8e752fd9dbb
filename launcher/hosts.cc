#include "launcher/hosts.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace hvdrun {
namespace {

constexpr long long kMaxSlots = 1 << 20;

bool valid_hostname_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// Checks a host name or address (IPv6 already unbracketed). Returns "" when fine.
std::string check_host(std::string_view host, bool bracketed) {
  if (host.empty()) return "empty host name";
  for (char c : host) {
    bool ok = bracketed ? (std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.' || c == '%' ||
                           std::isalnum(static_cast<unsigned char>(c)))
                        : valid_hostname_char(c);
    if (!ok) return std::string("invalid character '") + c + "' in host '" + std::string(host) + "'";
  }
  return "";
}

struct HostToken {
  std::string host;
  std::string slots;  // empty when not given
  bool has_slots = false;
};

// Splits "host", "host:N", "[v6]" or "[v6]:N".
Result<HostToken> split_host_token(std::string_view tok) {
  HostToken out;
  std::string_view rest;
  bool bracketed = false;
  if (!tok.empty() && tok[0] == '[') {
    size_t close = tok.find(']');
    if (close == std::string_view::npos) return make_error("missing ']' in '" + std::string(tok) + "'", 2);
    out.host = std::string(tok.substr(1, close - 1));
    rest = tok.substr(close + 1);
    bracketed = true;
    if (!rest.empty() && rest[0] != ':')
      return make_error("unexpected '" + std::string(rest) + "' after ']' in '" + std::string(tok) + "'", 2);
  } else {
    size_t colon = tok.find(':');
    if (colon != std::string_view::npos && tok.find(':', colon + 1) != std::string_view::npos)
      return make_error("'" + std::string(tok) + "': IPv6 addresses must be written in brackets, as [" +
                            std::string(tok) + "]:SLOTS",
                        2);
    out.host = std::string(tok.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : tok.substr(colon);
  }
  std::string bad = check_host(out.host, bracketed);
  if (!bad.empty()) return make_error(bad, 2);
  if (!rest.empty()) {  // ":N"
    out.slots = std::string(rest.substr(1));
    out.has_slots = true;
  }
  return out;
}

}  // namespace

void add_host(std::vector<HostSlots>& hosts, const std::string& host, int slots) {
  for (auto& h : hosts) {
    if (h.host == host) {
      h.slots += slots;
      return;
    }
  }
  hosts.push_back({host, slots});
}

Result<std::vector<HostSlots>> parse_host_list(std::string_view list) {
  std::vector<HostSlots> hosts;
  if (trim(list).empty()) return make_error("host list '" + std::string(list) + "': expected host[:slots],...", 2);
  for (const std::string& raw : split(list, ',')) {
    std::string_view tok = trim(raw);
    if (tok.empty())
      return make_error("host list '" + std::string(list) + "': empty entry; expected host[:slots],...", 2);
    auto ht = split_host_token(tok);
    if (!ht) return wrap(ht.error(), "host list '" + std::string(list) + "'");
    int slots = 1;
    if (ht->has_slots) {
      auto n = parse_int(ht->slots, "slot count of '" + std::string(tok) + "'", 1, kMaxSlots);
      if (!n) return wrap(n.error(), "host list '" + std::string(list) + "'");
      slots = static_cast<int>(*n);
    }
    add_host(hosts, ht->host, slots);
  }
  return hosts;
}

Result<std::vector<HostSlots>> parse_hostfile_text(std::string_view text, const std::string& filename) {
  std::vector<HostSlots> hosts;
  int lineno = 0;
  for (const std::string& raw : split(text, '\n')) {
    ++lineno;
    std::string_view line = raw;
    size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    auto where = [&](const std::string& msg) {
      return make_error(filename + ":" + std::to_string(lineno) + ": " + msg, 2);
    };
    // Tokens separated by blanks.
    std::vector<std::string> toks;
    std::istringstream is{std::string(line)};
    for (std::string t; is >> t;) toks.push_back(t);
    auto ht = split_host_token(toks[0]);
    if (!ht) return where(ht.error().message);
    int slots = 1;
    bool slots_seen = false;
    if (ht->has_slots) {
      auto n = parse_int(ht->slots, "slot count", 1, kMaxSlots);
      if (!n) return where(n.error().message);
      slots = static_cast<int>(*n);
      slots_seen = true;
    }
    for (size_t i = 1; i < toks.size(); ++i) {
      const std::string& t = toks[i];
      size_t eq = t.find('=');
      std::string key = t.substr(0, eq);
      if (eq != std::string::npos && (key == "slots" || key == "slot")) {
        if (slots_seen) return where("slots given twice in '" + std::string(line) + "'");
        auto n = parse_int(t.substr(eq + 1), "slots", 1, kMaxSlots);
        if (!n) return where(n.error().message);
        slots = static_cast<int>(*n);
        slots_seen = true;
      } else if (eq != std::string::npos && (key == "max_slots" || key == "max-slots")) {
        auto n = parse_int(t.substr(eq + 1), "max_slots", 0, kMaxSlots);  // accepted and ignored
        if (!n) return where(n.error().message);
      } else {
        return where("unexpected token '" + t + "'; expected 'host slots=N', 'host:N' or 'host'");
      }
    }
    add_host(hosts, ht->host, slots);
  }
  if (hosts.empty()) return make_error(filename + ": no hosts in host file", 2);
  return hosts;
}

Result<std::vector<HostSlots>> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error("host file '" + path + "': " + std::strerror(errno), 2);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hostfile_text(ss.str(), path);
}

int total_slots(const std::vector<HostSlots>& hosts) {
  long long n = 0;
  for (const auto& h : hosts) n += h.slots;
  return static_cast<int>(std::min<long long>(n, 1 << 30));
}

}  // namespace hvdrun
