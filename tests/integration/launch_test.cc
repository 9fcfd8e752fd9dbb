// The real hvdrun binary with real workers: environment, Horovod's variables and store,
// stdin, scale, exit codes, bad input, dry runs, bounds. (Output: launch_output_test.cc;
// failures and signals: launch_signal_test.cc.)
#include "launch_test_util.h"

using namespace testing_hvdrun;
using namespace launch_test;

TEST(Launch, WorkerEnvironmentAndWorkingDirectory) {
  auto o = run(hvd({"-np", "2", "-x", "HVD_TEST_A=1", "-x", "HVD_TEST_B", "sh", "-c",
                    "echo $HVD_TEST_A $HVD_TEST_B $LOCAL_RANK $LOCAL_WORLD_SIZE $WORLD_SIZE $GROUP_RANK "
                    "$MASTER_ADDR ${MASTER_PORT:+port} $PYTHONUNBUFFERED $HOROVOD_HOSTNAME ${OLDPWD:-nooldpwd} $(pwd)"}),
               30, {{"HVD_TEST_B", "fwd"}, {"OLDPWD", "/nowhere"}});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::string cwd = std::filesystem::current_path().string();
  EXPECT_NE(o.out.find("[0]<stdout>:1 fwd 0 2 2 0 127.0.0.1 port 1 localhost nooldpwd " + cwd), std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:1 fwd 1 2 2 0 127.0.0.1 port 1 localhost nooldpwd " + cwd), std::string::npos);
}

// hvdrun --horovod: what horovodrun --gloo gives the workers, and Horovod's store served.
TEST(Launch, HorovodGivesTheWorkersHorovodrunsGlooVariables) {
  for (bool by_env : {false, true}) {
    std::vector<std::string> args = {"-np", "2", "sh", "-c",
                                     "env | grep -E '^HOROVOD_(GLOO|CONTROLLER|CPU_OPERATIONS|HOSTNAME|RANK|SIZE)' | sort"};
    if (!by_env) args.insert(args.begin(), "--horovod");
    auto o = run(hvd(args), 30, by_env ? std::map<std::string, std::string>{{"HVDRUN_HOROVOD", "1"}}
                                       : std::map<std::string, std::string>{});
    ASSERT_EQ(o.exit_code, 0) << o.err;
    for (int r = 0; r < 2; ++r) {
      std::string t = "[" + std::to_string(r) + "]<stdout>:";
      EXPECT_NE(o.out.find(t + "HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_GLOO_IFACE=lo\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_CONTROLLER=gloo\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_CPU_OPERATIONS=gloo\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_HOSTNAME=localhost\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_RANK=" + std::to_string(r) + "\n"), std::string::npos) << o.out;
      EXPECT_NE(o.out.find(t + "HOROVOD_SIZE=2\n"), std::string::npos) << o.out;
    }
    std::smatch m;
    std::string out = o.out;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(HOROVOD_GLOO_RENDEZVOUS_PORT=(\d+))"))) << o.out;
    EXPECT_GT(std::stoi(m[1].str()), 0);
  }
  auto plain = run(hvd({"-np", "1", "sh", "-c", "env | grep -c '^HOROVOD_GLOO' || true"}), 30);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("[0]<stdout>:0\n"), std::string::npos) << plain.out;  // not without --horovod
}

TEST(Launch, HorovodStoreServedToTheWorkers) {
  if (run({"python3", "-c", "import urllib.request"}, 60).exit_code != 0) GTEST_SKIP() << "no python3";
  // Each rank PUTs its key as Horovod's client would, waits for the other's (polling GET, 404
  // until it is there), then rank 0 DELETEs an ad-hoc key; a GET of a missing key is 404.
  std::string client = std::string(TEST_SOURCE_DIR) + "/integration/horovod_store_client.py";
  auto o = run(hvd({"--horovod", "-np", "2", "python3", client, "probe"}), 60);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:got b'value\\x00of 1'"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:got b'value\\x00of 0'"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[0]<stdout>:missing 404 bad 400 post 405"), std::string::npos) << o.out;
}

// Filled to its key cap by a client, the store still takes the job's rendezvous (what
// Horovod's hvd.init() PUTs): it aborted the next init (SIGABRT in Horovod) before.
TEST(Launch, HorovodStoreFilledByAClientStillTakesTheJobsRendezvous) {
  if (run({"python3", "-c", "import urllib.request"}, 60).exit_code != 0) GTEST_SKIP() << "no python3";
  std::string client = std::string(TEST_SOURCE_DIR) + "/integration/horovod_store_client.py";
  std::string dir = make_temp_dir();
  auto o = run(hvd({"--horovod", "-np", "2", "python3", client, "fill", dir}), 120, {{"HVDRUN_HOROVOD_STORE_KEYS", "200"}});
  std::filesystem::remove_all(dir);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:filled 200 keys, then 507"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[0]<stdout>:rendezvous done"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("[1]<stdout>:rendezvous done"), std::string::npos) << o.out;
  auto bad = run(hvd({"--horovod", "-np", "1", "true"}), 30, {{"HVDRUN_HOROVOD_STORE_KEYS", "many"}});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("HVDRUN_HOROVOD_STORE_KEYS 'many'"), std::string::npos) << bad.err;
}

TEST(Launch, StdinGoesToRankZeroOnly) {
  std::string input = "line one\nline two\n";
  auto o = run(hvd({"-np", "2", "sh", "-c", "cat; echo end"}), 30, {}, &input);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("[0]<stdout>:line one\n"), std::string::npos);
  EXPECT_NE(o.out.find("[0]<stdout>:line two\n"), std::string::npos);
  EXPECT_EQ(o.out.find("[1]<stdout>:line"), std::string::npos);
  EXPECT_NE(o.out.find("[1]<stdout>:end\n"), std::string::npos);
}


TEST(Launch, SixtyFourLocalWorkers) {
  auto o = run(hvd({"-np", "64", "sh", "-c", "echo $RANK $LOCAL_RANK $WORLD_SIZE"}), 60);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto lines = split_lines(o.out);
  ASSERT_EQ(lines.size(), 64u);
  std::set<std::string> got(lines.begin(), lines.end());
  for (int r = 0; r < 64; ++r) {
    std::string rs = std::to_string(r);
    EXPECT_TRUE(got.count("[" + rs + "]<stdout>:" + rs + " " + rs + " 64")) << r;
  }
}

TEST(Launch, RaisesTheOpenFileLimitForManyWorkers) {
  // 40 workers need 80 pipe ends: more than a soft limit of 64 allows, fine under the hard one.
  auto o = run({"sh", "-c", "ulimit -Sn 64 && exec " + kHvdrun + " -np 40 true"}, 60);
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST(Launch, ExitCodes) {
  EXPECT_EQ(run(hvd({"-np", "2", "true"})).exit_code, 0);
  EXPECT_EQ(run(hvd({"-np", "2", "sh", "-c", "exit $((RANK + 3))"})).exit_code, 3);
  auto nf = run(hvd({"-np", "2", "no-such-program-hvdrun"}));
  EXPECT_EQ(nf.exit_code, 127);
  EXPECT_EQ(nf.err, "hvdrun: no-such-program-hvdrun: command not found\n");
  std::string dir = make_temp_dir();
  std::ofstream(dir + "/plain") << "echo hi\n";
  chmod((dir + "/plain").c_str(), 0644);
  auto nx = run(hvd({"-np", "1", dir + "/plain"}));
  EXPECT_EQ(nx.exit_code, 126);
  EXPECT_EQ(nx.err, "hvdrun: " + dir + "/plain: permission denied\n");
  auto isdir = run(hvd({"-np", "1", dir}));
  EXPECT_EQ(isdir.exit_code, 126);
  EXPECT_EQ(isdir.err, "hvdrun: " + dir + ": is a directory\n");
  std::filesystem::remove_all(dir);
  auto usage = run(hvd({"-np", "2", "-H", "a:1", "true"}));
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.err, "hvdrun: requested more processes (2) than there are available slots (1)\n");
  EXPECT_EQ(usage.out, "");
  auto remote = run(hvd({"-H", "unresolvable-host-x:1", "true"}));
  EXPECT_EQ(remote.exit_code, 3);
  EXPECT_NE(remote.err.find("hvdrun: unresolvable-host-x:22: cannot resolve the host name"), std::string::npos)
      << remote.err;
}

TEST(Launch, BadInputIsOneLineAndLaunchesNothing) {
  std::string dir = make_temp_dir();
  std::string marker = dir + "/ran";
  std::string hf = dir + "/hosts";
  std::ofstream(hf) << "localhost slots=2\nlocalhost gpus=2\n";
  std::vector<std::vector<std::string>> bad = {
      {"-np", "two", "touch", marker},       {"-H", "localhost:x", "touch", marker},
      {"--hostfile", hf, "touch", marker},   {"-np", "1", "--kill-grace", "-1", "touch", marker},
      {"-np", "1", "-x", "1BAD", "touch", marker}, {"--frobnicate", "touch", marker},
      {"-np", "1"},
  };
  for (const auto& args : bad) {
    auto o = run(hvd(args), 30);
    EXPECT_EQ(o.exit_code, 2) << args[0];
    auto lines = split_lines(o.err);
    ASSERT_EQ(lines.size(), 1u) << o.err;
    EXPECT_EQ(lines[0].rfind("hvdrun: ", 0), 0u) << o.err;
    EXPECT_EQ(o.out, "");
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
  auto o = run(hvd({"--hostfile", hf, "true"}), 30);
  EXPECT_EQ(o.err, "hvdrun: " + hf + ":2: unexpected token 'gpus=2'; expected 'host slots=N', 'host:N' or 'host'\n");
  std::filesystem::remove_all(dir);
}

TEST(Launch, DryRunPrintsThePlanWithUnresolvableHosts) {
  auto o = run(hvd({"--dry-run", "-H", "no-such-host-1:2,[::1]:1", "--bind-to", "none", "python3", "train.py", "--epochs",
                    "1"}),
               30);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto lines = split_lines(o.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            R"({"rank":0,"size":3,"local_rank":0,"local_size":2,"cross_rank":0,"cross_size":2,"host":"no-such-host-1","bind":"none","argv":["python3","train.py","--epochs","1"]})");
  EXPECT_EQ(lines[2],
            R"({"rank":2,"size":3,"local_rank":0,"local_size":1,"cross_rank":1,"cross_size":2,"host":"::1","bind":"none","argv":["python3","train.py","--epochs","1"]})");
}

// Elastic (issue 28): the discovery script's hosts, ranked in its line order up to --max-np;
// its bad line named; an elastic run refused until the driver exists.
TEST(Launch, ElasticDryRunRanksTheDiscoveredHosts) {
  std::string dir = make_temp_dir();
  std::string hosts = dir + "/hosts";
  std::ofstream(hosts) << "node-z:2\nnode-a\nnode-m:4\n";
  std::vector<std::string> base = {"--dry-run", "-np", "2", "--max-np", "4", "--slots-per-host", "1",
                                   "--host-discovery-script", "cat " + hosts};
  auto args = base;
  args.push_back("prog");
  auto o = run(hvd(args), 30);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto lines = split_lines(o.out);
  ASSERT_EQ(lines.size(), 4u) << o.out;
  EXPECT_NE(lines[1].find(R"("rank":1,"size":4,"local_rank":1,"local_size":2,"cross_rank":0,"cross_size":1,"host":"node-z")"),
            std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(R"("host":"node-a")"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find(R"("rank":3,"size":4,"local_rank":0,"local_size":1,"cross_rank":2,"cross_size":3,"host":"node-m")"),
            std::string::npos) << lines[3];
  EXPECT_NE(o.err.find("hvdrun: elastic: min-np 2, max-np 4, hosts from 'cat " + hosts + "' every 1 s"),
            std::string::npos) << o.err;
  // The test rewrites the file: a bad line is named with its number, nothing planned.
  std::ofstream(hosts) << "node-z:2\nnode-a:two\n";
  auto bad = run(hvd(args), 30);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("line 2 'node-a:two': expected host[:slots]"), std::string::npos) << bad.err;
  // Too few slots for --min-np.
  std::ofstream(hosts) << "node-z:1\n";
  auto few = run(hvd(args), 30);
  EXPECT_EQ(few.exit_code, 2);
  EXPECT_NE(few.err.find("1 slot(s) missing: 1 available, --min-np 2"), std::string::npos) << few.err;
  // Not a dry run: this machine's hosts run (docs/ELASTIC.md); another machine's is reached
  // through its agent, as in any job: one that cannot be reached stops the job before
  // anything starts.
  std::ofstream(hosts) << "localhost:2\n";
  auto real = run(hvd({"-np", "2", "--host-discovery-script", "cat " + hosts, "true"}), 30);
  EXPECT_EQ(real.exit_code, 0) << real.err;
  std::ofstream(hosts) << "node-z:2\n";
  auto remote = run(hvd({"-np", "2", "--host-discovery-script", "cat " + hosts, "true"}), 30);
  EXPECT_EQ(remote.exit_code, 3) << remote.err;
  EXPECT_NE(remote.err.find("1 of 1 remote host(s) failed to connect; nothing was started on any host"),
            std::string::npos)
      << remote.err;
  std::filesystem::remove_all(dir);
}

TEST(Launch, PyTorchDdpJobRunsUnchanged) {
  if (run({"/usr/bin/python3", "-c", "import torch.distributed"}, 120).exit_code != 0)
    GTEST_SKIP() << "Debian's python3-torch is not installed for /usr/bin/python3";
  std::string script = std::string(TEST_SOURCE_DIR) + "/integration/ddp_train.py";
  auto o = run(hvd({"-np", "3", "/usr/bin/python3", script}), 240);
  ASSERT_FALSE(o.timed_out);
  ASSERT_EQ(o.exit_code, 0) << o.err.substr(0, 3000);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(o.out.find("[" + std::to_string(r) + "]<stdout>:rank " + std::to_string(r) + "/3 ok"), std::string::npos)
        << o.out;
}

// Issue 16.6: the descriptor budget is checked before anything starts (exit 3, one line).
TEST(Launch, NpOverTheDescriptorBudgetIsRefusedBeforeAnythingStarts) {
  std::string dir = make_temp_dir();
  std::string marker = dir + "/started";
  auto o = run({"sh", "-c", "ulimit -n 256 && exec " + kHvdrun + " -np 200 sh -c 'echo x >> " + marker + "; sleep 5'"},
               60);
  EXPECT_EQ(o.exit_code, 3) << o.err;
  auto lines = split_lines(o.err);
  ASSERT_EQ(lines.size(), 1u) << o.err;
  EXPECT_EQ(lines[0].rfind("hvdrun: 200 ranks need about 6", 0), 0u) << o.err;
  EXPECT_NE(lines[0].find(" open files in hvdrun, over its limit of 256 (RLIMIT_NOFILE, 'ulimit -n')"),
            std::string::npos)
      << o.err;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "workers were started";
  std::filesystem::remove_all(dir);
}

// Issues 16.10, 16.11, 16.14 through the real binary: one line, exit 2, nothing run.
TEST(Launch, HostListsAndHostFilesPastTheirBounds) {
  std::string dir = make_temp_dir();
  std::string many;
  for (int i = 0; i < 2100; ++i) many += (i ? ",h" : "h") + std::to_string(i) + ":1048576";
  std::string bom = dir + "/bom";
  std::ofstream(bom) << "\xEF\xBB\xBFlocalhost slots=2\r\n";
  struct Case {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"--dry-run", "-H", many, "true"},
       "hvdrun: the hosts have 2202009600 slots in all, more than the 1048576 ranks one job may have; give -np\n"},
      {{"--hostfile", "/dev/zero", "true"},
       "hvdrun: host file '/dev/zero': is a character device; expected a regular file\n"},
      {{"--hostfile", dir, "true"}, "hvdrun: host file '" + dir + "': is a directory; expected a regular file\n"},
      {{"--hosts=-oProxyCommand:1", "true"},
       "hvdrun: host list '-oProxyCommand:1': host '-oProxyCommand' starts with '-'; expected a host name or "
       "address, not an option\n"},
  };
  for (const auto& c : cases) {  // refused before anything is read or run (the message says which check)
    auto o = run(hvd(c.args), 30);
    ASSERT_FALSE(o.timed_out) << c.args[1];
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_EQ(o.err, c.err);
    EXPECT_EQ(o.out, "");
  }
  auto o = run(hvd({"--dry-run", "--hostfile", bom, "true"}), 30);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(split_lines(o.out).size(), 2u);
  std::filesystem::remove_all(dir);
}


// A launch command, or the remote shell of an SSH client, that prints text on stdout (a
// greeting, a login banner, a ~/.bashrc that echoes) before it starts the agent, or instead
// of starting it: hvdrun read the text as a frame header and said only "agent frame of
// 1466264675 bytes". It now quotes the text (exit 3, as any host that does not start), and
// the agent that was started after the text does not outlive hvdrun. The launchers are
// shell scripts here, the "remote" host this machine.
TEST(Launch, TextPrintedBeforeTheAgentIsQuotedNotTakenForAFrame) {
  std::string dir = make_temp_dir();
  auto script = [&](const std::string& name, const std::string& body) {
    std::string path = dir + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    chmod(path.c_str(), 0755);
    return path;
  };
  struct Case {
    std::vector<std::string> launcher;
    std::string said;
  };
  const std::string by_command = "hvdrun: fakehost: the launch command printed text on stdout before the agent started: ";
  Case cases[] = {
      // Greets, then starts the agent.
      {{"--launch-command", script("greets", "echo $$ > " + dir + "/agent\necho \"Welcome to $1\"\nshift\nexec \"$@\"\n") + " {host}"},
       by_command + "'Welcome to fakehost\\x0a'"},
      // Says why it cannot, on stdout, and exits 1.
      {{"--launch-command", script("fails", "echo \"error: pod $1 not found\"\nexit 1\n") + " {host}"},
       by_command + "'error: pod fakehost not found\\x0a'"},
      // Fewer bytes than a frame's header, then the end of the stream.
      {{"--launch-command", script("brief", "echo hi\nexit 1\n") + " {host}"}, by_command + "'hi\\x0a'"},
      // An OpenSSH-style client whose remote shell greets, then runs the agent.
      {{"--ssh-command", script("ssh", "while [ \"$1\" != -- ]; do shift; done\necho \"Last login: $2\"\nexec sh -c \"$3\"\n")},
       "hvdrun: fakehost: the remote shell printed text on stdout before the agent started: 'Last login: fakehost\\x0a'"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"-np", "1", "-H", "fakehost:1"};
    args.insert(args.end(), c.launcher.begin(), c.launcher.end());
    args.insert(args.end(), {"echo", "ran"});
    auto o = run(hvd(args), 60);
    ASSERT_FALSE(o.timed_out) << c.said;
    EXPECT_EQ(o.exit_code, 3) << o.err;
    EXPECT_NE(o.err.find(c.said), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("agent frame of"), std::string::npos) << o.err;
    EXPECT_EQ(o.out.find("ran"), std::string::npos) << o.out;
  }
  ASSERT_TRUE(wait_for_lines(dir + "/agent", 1, 1));
  EXPECT_TRUE(wait_gone({std::stoi(read_file(dir + "/agent"))}, 10).empty()) << "the agent started after the text outlived hvdrun";
  std::filesystem::remove_all(dir);
}
