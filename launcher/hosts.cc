#include "launcher/hosts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <unordered_map>

#include "launcher/exit_status.h"
#include "common/strings.h"
#include "common/unique_fd.h"

namespace hvdrun {
namespace {

bool valid_hostname_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

bool valid_address_char(char c) {  // inside brackets: IPv6, with an optional %zone
  return std::isalnum(static_cast<unsigned char>(c)) || c == ':' || c == '.' || c == '%' || c == '-' || c == '_';
}

std::string quoted(std::string_view s) { return "'" + printable(s) + "'"; }

// Checks a host name or address (IPv6 already unbracketed). Returns "" when fine.
std::string check_host(std::string_view host, bool bracketed) {
  if (host.empty()) return "empty host name";
  if (host[0] == '-')
    return "host " + quoted(host) + " starts with '-'; expected a host name or address, not an option";
  for (char c : host) {
    if (!(bracketed ? valid_address_char(c) : valid_hostname_char(c)))
      return "invalid character " + quoted(std::string_view(&c, 1)) + " in host " + quoted(host) +
             "; expected letters, digits, '-', '.' and '_'" + (bracketed ? ", ':' and '%'" : "");
  }
  if (host.size() > kMaxHostNameBytes)
    return "host " + quoted(host) + " is " + std::to_string(host.size()) + " bytes long; expected at most " +
           std::to_string(kMaxHostNameBytes);
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
    if (close == std::string_view::npos) return error_of(ErrorKind::kUsage, "missing ']' in " + quoted(tok));
    out.host = std::string(tok.substr(1, close - 1));
    rest = tok.substr(close + 1);
    bracketed = true;
    if (!rest.empty() && rest[0] != ':')
      return error_of(ErrorKind::kUsage, "unexpected " + quoted(rest) + " after ']' in " + quoted(tok));
  } else {
    size_t colon = tok.find(':');
    if (colon != std::string_view::npos && tok.find(':', colon + 1) != std::string_view::npos)
      return error_of(ErrorKind::kUsage, quoted(tok) + ": IPv6 addresses must be written in brackets, as [" + printable(tok) +
                            "]:SLOTS");
    out.host = std::string(tok.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : tok.substr(colon);
  }
  std::string bad = check_host(out.host, bracketed);
  if (!bad.empty()) return error_of(ErrorKind::kUsage, bad);
  if (!rest.empty()) {  // ":N"
    out.slots = std::string(rest.substr(1));
    out.has_slots = true;
  }
  return out;
}

// Hosts in first-appearance order, repeats added up, found by name in O(1).
class HostListBuilder {
 public:
  Status add(const std::string& host, long long slots) {
    auto [it, fresh] = index_.try_emplace(host, hosts_.size());
    if (fresh) {
      hosts_.push_back({host, static_cast<int>(slots)});
      return {};
    }
    long long sum = static_cast<long long>(hosts_[it->second].slots) + slots;
    if (sum > kMaxSlotsPerHost)
      return error_of(ErrorKind::kUsage, "host " + quoted(host) + " has " + std::to_string(sum) +
                            " slots in all (named more than once); expected at most " +
                            std::to_string(kMaxSlotsPerHost));
    hosts_[it->second].slots = static_cast<int>(sum);
    return {};
  }
  std::vector<HostSlots> take() { return std::move(hosts_); }

 private:
  std::vector<HostSlots> hosts_;
  std::unordered_map<std::string, size_t> index_;
};

Result<long long> parse_slots(std::string_view s, std::string_view what, long long min) {
  auto n = parse_int(s, what, min, kMaxSlotsPerHost);
  if (!n && s.size() > 0) {  // the number quoted as parse_int would not
    bool plain = true;
    for (char c : s) plain = plain && c >= 0x20 && c < 0x7f;
    if (!plain) return error_of(ErrorKind::kUsage, std::string(what) + " " + quoted(s) + ": expected an integer");
  }
  return n;
}

}  // namespace

std::string check_host_name(std::string_view host) {
  bool v6 = host.find(':') != std::string_view::npos;
  return check_host(host, v6);
}

void add_host(std::vector<HostSlots>& hosts, const std::string& host, int slots) {
  for (auto& h : hosts) {
    if (h.host == host) {
      h.slots = static_cast<int>(std::min<long long>(static_cast<long long>(h.slots) + slots, kMaxSlotsPerHost));
      return;
    }
  }
  hosts.push_back({host, slots});
}

Result<std::vector<HostSlots>> parse_host_list(std::string_view list) {
  HostListBuilder hosts;
  auto ctx = "host list " + quoted(list);
  if (trim(list).empty()) return error_of(ErrorKind::kUsage, ctx + ": expected host[:slots],...");
  for (const std::string& raw : split(list, ',')) {
    std::string_view tok = trim(raw);
    if (tok.empty()) return error_of(ErrorKind::kUsage, ctx + ": empty entry; expected host[:slots],...");
    auto ht = split_host_token(tok);
    if (!ht) return wrap(ht.error(), ctx);
    long long slots = 1;
    if (ht->has_slots) {
      auto n = parse_slots(ht->slots, "slot count of " + quoted(tok), 1);
      if (!n) return wrap(n.error(), ctx);
      slots = *n;
    }
    if (auto st = hosts.add(ht->host, slots); !st) return wrap(st.error(), ctx);
  }
  return hosts.take();
}

namespace {

// A host file line's words, separated by blanks.
void split_blanks(std::string_view line, std::vector<std::string_view>& toks) {
  toks.clear();
  for (size_t i = 0; i < line.size();) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\v' ||
                               line[i] == '\f'))
      ++i;
    size_t b = i;
    while (i < line.size() && !(line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\v' ||
                                line[i] == '\f'))
      ++i;
    if (i > b) toks.push_back(line.substr(b, i - b));
  }
}

// One host file line's words ("host", "host:N", "host slots=N [max_slots=M]") added to
// `hosts`; `where` makes an error that names the line.
template <class Where>
Status add_hostfile_line(std::string_view line, const std::vector<std::string_view>& toks, HostListBuilder& hosts,
                         Where where) {
  auto ht = split_host_token(toks[0]);
  if (!ht) return where(ht.error().message);
  long long slots = 1;
  bool slots_seen = false;
  if (ht->has_slots) {
    auto n = parse_slots(ht->slots, "slot count", 1);
    if (!n) return where(n.error().message);
    slots = *n;
    slots_seen = true;
  }
  for (size_t i = 1; i < toks.size(); ++i) {
    std::string_view t = toks[i];
    size_t eq = t.find('=');
    std::string_view key = t.substr(0, eq);
    std::string_view val = eq == std::string_view::npos ? std::string_view{} : t.substr(eq + 1);
    if (eq != std::string_view::npos && (key == "slots" || key == "slot")) {
      if (slots_seen) return where("slots given twice in " + quoted(line));
      auto n = parse_slots(val, "slots", 1);
      if (!n) return where(n.error().message);
      slots = *n;
      slots_seen = true;
    } else if (eq != std::string_view::npos && (key == "max_slots" || key == "max-slots")) {
      auto n = parse_slots(val, "max_slots", 0);  // accepted and ignored
      if (!n) return where(n.error().message);
    } else {
      return where("unexpected token " + quoted(t) + "; expected 'host slots=N', 'host:N' or 'host'");
    }
  }
  if (auto st = hosts.add(ht->host, slots); !st) return where(st.error().message);
  return {};
}

}  // namespace

Result<std::vector<HostSlots>> parse_hostfile_text(std::string_view text, const std::string& filename) {
  HostListBuilder hosts;
  bool any = false;
  if (starts_with(text, "\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 BOM (Windows editors)
  int lineno = 0;
  std::vector<std::string_view> toks;
  while (!text.empty() || lineno == 0) {
    ++lineno;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) {
      if (text.empty()) break;
      continue;
    }
    auto where = [&](const std::string& msg) {
      return error_of(ErrorKind::kBadHostFile, printable(filename) + ":" + std::to_string(lineno) + ": " + msg);
    };
    split_blanks(line, toks);
    if (auto st = add_hostfile_line(line, toks, hosts, where); !st) return st.error();
    any = true;
    if (text.empty()) break;
  }
  if (!any) return error_of(ErrorKind::kBadHostFile, printable(filename) + ": no hosts in host file");
  return hosts.take();
}

Result<std::vector<HostSlots>> read_hostfile(const std::string& path) {
  auto fail = [&](const std::string& why) { return error_of(ErrorKind::kBadHostFile, "host file " + quoted(path) + ": " + why); };
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below anyway).
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return fail(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a pipe"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return fail(std::string("is ") + kind + "; expected a regular file");
  }
  auto too_big = [&](long long size) {
    return fail("is " + std::to_string(size) + " bytes; expected at most " + std::to_string(kMaxHostfileBytes));
  };
  if (static_cast<unsigned long long>(st.st_size) > kMaxHostfileBytes) return too_big(st.st_size);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (true) {  // the file may have grown since fstat: read to its end, within the bound
    if (got == text.size()) text.resize(std::min(text.size() + 65536, kMaxHostfileBytes + 1));
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return fail(std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got > kMaxHostfileBytes) return too_big(static_cast<long long>(got));
  }
  text.resize(got);
  return parse_hostfile_text(text, path);
}

long long total_slots(const std::vector<HostSlots>& hosts) {
  long long n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

}  // namespace hvdrun
