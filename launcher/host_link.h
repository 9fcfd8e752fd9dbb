// A byte stream to `hvdrun --agent` on a remote host: its stdin and stdout, plus what it
// printed on stderr and its exit status. Two ways in: libssh in-process (SshLink), or an
// OpenSSH-style client command (--ssh-command) as a child process with pipes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hvdrun {

enum class HostKeyPolicy { kYes, kAcceptNew, kNo };
Result<HostKeyPolicy> parse_host_key_policy(const std::string& s);

struct SshSettings {
  int port = 0;                  // -p; 0: ~/.ssh/config's Port, else 22
  std::string identity_file;     // -i; "": the ssh agent, then config and default keys
  HostKeyPolicy host_key_policy = HostKeyPolicy::kAcceptNew;
  std::string ssh_dir;           // ~/.ssh ($HOME/.ssh): config, known_hosts, default keys
  std::string ssh_command;       // --ssh-command: launch through this client instead
  double connect_timeout = 30;   // seconds (the start time-out)
};

class HostLink {
 public:
  virtual ~HostLink() = default;
  // "node2:22" (the port libssh resolved), or the host for --ssh-command.
  virtual const std::string& label() const = 0;
  virtual Status write(std::string_view data) = 0;
  // Bytes write() takes now without blocking (0 when the far side has stopped reading).
  virtual size_t write_room() = 0;
  // Up to `timeout_ms` for the agent's stdout: bytes, "" on time-out, an error with code
  // kPeerClosed at EOF, another error when the connection failed.
  virtual Result<std::string> read(int timeout_ms) = 0;
  virtual std::string stderr_text() = 0;      // what the remote command printed on stderr
  virtual std::optional<int> exit_status() = 0;  // once the remote command has ended
  virtual std::string local_address() const = 0;  // this side of the connection, or ""
};

// Connects, checks the host key, authenticates and runs `command` on `host`. Errors are
// one line: "node2:22: connection refused", "...: authentication failed (publickey)".
Result<std::unique_ptr<HostLink>> open_ssh_link(const std::string& host, const SshSettings& s,
                                                const std::string& command);
// Runs `s.ssh_command [-p PORT] [-i FILE] host command` with pipes.
Result<std::unique_ptr<HostLink>> open_command_link(const std::string& host, const SshSettings& s,
                                                    const std::string& command);

// `word` quoted for a POSIX shell.
std::string shell_quote(const std::string& word);

}  // namespace hvdrun
