// A byte stream to `hvdrun --agent` on a remote host: its stdin and stdout, plus what it
// printed on stderr and its exit status. Three ways in: libssh in-process (SshLink), a
// client command as a child process with pipes (--ssh-command, --launch-command), or a
// socket the agent dialed back on (srun; launcher/starter.cc).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <vector>

#include "common/result.h"
#include "launcher/launch_command.h"

namespace hvdrun {

struct SshSettings {
  int port = 0;                  // -p; 0: ~/.ssh/config's Port, else 22
  std::string identity_file;     // -i; "": the ssh agent, then config and default keys
  HostKeyPolicy host_key_policy = HostKeyPolicy::kAcceptNew;
  std::string ssh_dir;           // ~/.ssh ($HOME/.ssh): config, known_hosts, default keys
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
  // kPeerLost at EOF, another error when the connection failed.
  virtual Result<std::string> read(int timeout_ms) = 0;
  virtual std::string stderr_text() = 0;      // what the remote command printed on stderr; only grows
  virtual std::optional<int> exit_status() = 0;  // once the remote command has ended
  // The connection's two ends when it is a socket of ours: this machine's address and the
  // host's ("" when unknown, e.g. through a client command).
  virtual std::string local_address() const = 0;
  virtual std::string peer_address() const = 0;
};

// Connects, checks the host key, authenticates and runs `command` on `host`. Errors are
// one line: "node2:22: connection refused", "...: authentication failed (publickey)".
Result<std::unique_ptr<HostLink>> open_ssh_link(const std::string& host, const SshSettings& s,
                                                const std::string& command);
// Runs `argv` (launch_command.h makes it) with pipes to its stdin, stdout and stderr;
// `label` names the host in messages.
Result<std::unique_ptr<HostLink>> open_command_link(const std::vector<std::string>& argv, const std::string& label);

}  // namespace hvdrun
