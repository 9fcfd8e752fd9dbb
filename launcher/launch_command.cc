#include "launcher/launch_command.h"

#include "launcher/exit_status.h"

#include <cstdio>
#include <wordexp.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace hvdrun {

Result<HostKeyPolicy> parse_host_key_policy(const std::string& s) {
  if (s == "yes") return HostKeyPolicy::kYes;
  if (s == "accept-new") return HostKeyPolicy::kAcceptNew;
  if (s == "no") return HostKeyPolicy::kNo;
  return error_of(ErrorKind::kUsage, "--ssh-host-key-checking '" + s + "': expected yes, accept-new or no");
}

std::string shell_quote(const std::string& w) {
  if (!w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%+=:,./-_", c);
      }))
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Result<std::vector<std::string>> split_command_line(const std::string& line, const std::string& what) {
  std::vector<std::string> argv;
  wordexp_t words{};
  if (wordexp(line.c_str(), &words, WRDE_NOCMD | WRDE_UNDEF) != 0)
    return error_of(ErrorKind::kUsage, what + " '" + line + "': expected a command line without substitutions");
  for (size_t i = 0; i < words.we_wordc; ++i) argv.push_back(words.we_wordv[i]);
  wordfree(&words);
  if (argv.empty()) return error_of(ErrorKind::kUsage, what + " is empty");
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
  // {host} is marked before splitting (a shell splitter refuses braces), placed after.
  const std::string mark = "\x01host\x01";
  std::string marked = launch_command;
  for (size_t at = marked.find("{host}"); at != std::string::npos; at = marked.find("{host}", at + mark.size()))
    marked.replace(at, 6, mark);
  auto argv = split_command_line(marked, "--launch-command");
  if (!argv) return error_of(ErrorKind::kUsage, "--launch-command '" + launch_command + "': expected a command line without substitutions");
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
