// hvdrun: wires the command line to the launcher. All logic lives in launcher/.
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cstdio>
#include "common/log.h"

#include "launcher/agent.h"
#include "launcher/exit_status.h"
#include "launcher/job.h"
#include "launcher/options.h"
#include "launcher/remote_agent.h"

extern char** environ;

int main(int argc, char** argv) {
  // Before any thread exists: signals go to the event loop, orphans come back to us.
  hvdrun::block_handled_signals();
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Two pipes per local worker: take the whole open-file allowance, as mpirun does.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  try {
    // On a remote host, started by hvdrun over SSH: the job arrives on stdin.
    if (argc >= 2 && std::string(argv[1]) == "--agent")
      return hvdrun::run_agent_mode(std::vector<std::string>(argv + 2, argv + argc));
    auto parsed = hvdrun::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (!parsed) {
      std::fprintf(stderr, "hvdrun: %s\n", parsed.error().message.c_str());
      return hvdrun::exit_code_for(parsed.error());
    }
    for (const auto& w : parsed->warnings) std::fprintf(stderr, "hvdrun: warning: %s\n", w.c_str());
    if (parsed->action == hvdrun::ParsedCommandLine::Action::kPrintAndExit) {
      std::fputs(parsed->print.c_str(), stdout);
      return 0;
    }
    spdlog::set_pattern("hvdrun: [%l] %v");
    spdlog::set_level(spdlog::level::from_str(parsed->options.log_level));
    return hvdrun::run_job(parsed->options, environ);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvdrun: internal error: %s\n", e.what());
    return 1;
  }
}
