#include "launcher/launch_command.h"

#include "common/strings.h"
#include "launcher/exit_status.h"

#include <cstdio>

#include <algorithm>
#include <cctype>
#include <string_view>

namespace hvdrun {
namespace {

// Whether `c` is one of `set` (never the NUL that ends it, as strchr would say).
bool one_of(char c, std::string_view set) { return set.find(c) != std::string_view::npos; }
constexpr std::string_view kBlanks = " \t";

// A blank at `i`, or the newline that ends `line` (nothing but blanks and newlines after it).
bool blank_at(const std::string& line, size_t i) {
  return one_of(line[i], kBlanks) || (line[i] == '\n' && line.find_first_not_of(" \t\n", i) == std::string::npos);
}

}  // namespace

Result<HostKeyPolicy> parse_host_key_policy(const std::string& s) {
  if (s == "yes") return HostKeyPolicy::kYes;
  if (s == "accept-new") return HostKeyPolicy::kAcceptNew;
  if (s == "no") return HostKeyPolicy::kNo;
  return error_of(ErrorKind::kUsage, "--ssh-host-key-checking '" + s + "': expected yes, accept-new or no");
}

std::string shell_quote(const std::string& w) {
  if (!w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || one_of(c, "@%+=:,./-_");
      }))
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {

// One word at `i` of `line` (past any blanks), as a POSIX shell reads it: '...' keeps
// everything, "..." lets a backslash escape $ ` " \ and a newline, a bare backslash escapes
// the next character (a backslash-newline continues the line); nothing is expanded. An
// error names what only a shell could act on (an operator, a newline that ends a command).
Result<std::string> next_word(const std::string& line, size_t& i) {
  std::string w;
  auto at = [&](const std::string& what, const std::string& hint = "") {
    return error_of(ErrorKind::kUsage, what + " at character " + std::to_string(i + 1) + hint);
  };
  while (i < line.size() && !blank_at(line, i)) {
    char c = line[i];
    if (c == '\'') {
      size_t end = line.find('\'', i + 1);
      if (end == std::string::npos) return at("a ' without its closing '");
      w.append(line, i + 1, end - i - 1);
      i = end + 1;
    } else if (c == '"') {
      size_t open = i++;
      for (; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size() && one_of(line[i + 1], "$`\"\\\n") && line[++i] == '\n')
          continue;  // a line continued
        w += line[i];
      }
      if (i == line.size()) {
        i = open;
        return at("a \" without its closing \"");
      }
      ++i;
    } else if (c == '\\') {
      if (i + 1 == line.size()) return at("a \\ with nothing after it");
      if (line[i + 1] != '\n') w += line[i + 1];
      i += 2;
    } else if (one_of(c, "|&;<>()`\n")) {
      return at(c == '\n' ? "a newline outside quotes" : std::string("'") + c + "' outside quotes",
                " (hvdrun runs no shell here: quote it, or run sh -c '...')");
    } else {
      w += line[i++];
    }
  }
  return w;
}

}  // namespace

Result<std::vector<std::string>> split_command_line(const std::string& line, const std::string& what) {
  std::vector<std::string> argv;
  auto fail = [&](const std::string& why) {
    return error_of(ErrorKind::kUsage, what + " '" + printable(line, 200, true) + "': " + why);
  };
  for (size_t i = 0;;) {
    while (i < line.size() && (blank_at(line, i) || line.compare(i, 2, "\\\n") == 0))
      i += line[i] == '\\' ? 2 : 1;  // (a line continued between words)
    if (i >= line.size()) break;
    auto w = next_word(line, i);
    if (!w) return fail(w.error().message);
    argv.push_back(std::move(*w));
  }
  if (argv.empty()) return fail("expected a command line, e.g. 'ssh -o ProxyJump=gw' or 'kubectl exec -i {host} --'");
  return argv;
}

std::vector<std::string> agent_words(double start_timeout) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "--start-timeout=%g", start_timeout);
  return {"--agent", buf};
}

std::string ssh_remote_command(const std::string& remote_hvdrun, double start_timeout) {
  std::string line = "exec " + shell_quote(remote_hvdrun);
  for (const auto& w : agent_words(start_timeout)) line += " " + w;
  return line;
}

Result<std::vector<std::string>> ssh_command_argv(const std::string& ssh_command, int port,
                                                  const std::string& identity_file, const std::string& host,
                                                  const std::string& remote_hvdrun, double start_timeout) {
  auto argv = split_command_line(ssh_command, "--ssh-command");
  if (!argv) return argv.error();
  if (port > 0) argv->insert(argv->end(), {"-p", std::to_string(port)});
  if (!identity_file.empty()) argv->insert(argv->end(), {"-i", identity_file});
  argv->insert(argv->end(), {"--", host, ssh_remote_command(remote_hvdrun, start_timeout)});
  return argv;
}

Result<std::vector<std::string>> template_argv(const std::string& launch_command, const std::string& host,
                                               const std::string& remote_hvdrun, double start_timeout) {
  auto argv = split_command_line(launch_command, "--launch-command");
  if (!argv) return argv.error();
  const std::string mark = "{host}";
  bool placed = false;
  for (auto& w : *argv)
    for (size_t at = w.find(mark); at != std::string::npos; at = w.find(mark, at + host.size())) {
      w.replace(at, mark.size(), host);
      placed = true;
    }
  if (!placed) argv->insert(argv->end(), {"--", host});
  argv->push_back(remote_hvdrun);
  for (auto& w : agent_words(start_timeout)) argv->push_back(std::move(w));
  return argv;
}

std::vector<std::string> srun_argv(const std::vector<std::string>& nodes, const std::string& remote_hvdrun,
                                   double start_timeout) {
  std::string n = std::to_string(nodes.size()), list;
  for (const auto& h : nodes) list += (list.empty() ? "" : ",") + h;
  // As Open MPI's plm/slurm starts its daemons: no PMI, no binding (the ranks are the
  // agents' children and would inherit it), a task dying badly ends the step.
  std::vector<std::string> argv = {"srun", "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1",
                                   "--kill-on-bad-exit=1", "--nodelist=" + list, "--mpi=none", "--cpu-bind=none",
                                   "--input=none", "--label", "--job-name=hvdrun-agents", "--", remote_hvdrun};
  for (auto& w : agent_words(start_timeout)) argv.push_back(std::move(w));
  return argv;
}

}  // namespace hvdrun
