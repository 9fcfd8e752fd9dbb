#include "launcher/worker_env.h"

#include <gtest/gtest.h>

namespace hvdrun {

TEST(WorkerEnv, ContractAndFiltering) {
  std::map<std::string, std::string> launcher{{"PATH", "/bin"}, {"OLDPWD", "/x"}, {"BASH_FUNC_f%%", "() {}"},
                                              {"HOME", "/root"}, {"RANK", "99"}};
  JobEnv job;
  job.master_addr = "10.0.0.1";
  job.master_port = 29500;
  job.rendezvous_addr = "10.0.0.1";
  job.rendezvous_port = 4000;
  job.secret_hex = "ab";
  job.iface = "eth1";
  job.nccl_debug = "INFO";
  RankInfo r{5, 8, 1, 4, 1, 2, 1, "node2"};
  auto env = build_worker_env(launcher, {{"FOO", "bar"}}, job, r, 1);
  EXPECT_EQ(env.count("OLDPWD"), 0u);
  EXPECT_EQ(env.count("BASH_FUNC_f%%"), 0u);
  EXPECT_EQ(env["PATH"], "/bin");
  EXPECT_EQ(env["FOO"], "bar");
  EXPECT_EQ(env["HOROVOD_RANK"], "5");
  EXPECT_EQ(env["HOROVOD_SIZE"], "8");
  EXPECT_EQ(env["HOROVOD_LOCAL_RANK"], "1");
  EXPECT_EQ(env["HOROVOD_LOCAL_SIZE"], "4");
  EXPECT_EQ(env["HOROVOD_CROSS_RANK"], "1");
  EXPECT_EQ(env["HOROVOD_CROSS_SIZE"], "2");
  EXPECT_EQ(env["HOROVOD_HOSTNAME"], "node2");
  EXPECT_EQ(env["RANK"], "5");  // the contract wins over an inherited value
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "1");
  EXPECT_EQ(env["HVDRUN_RENDEZVOUS_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["HVDRUN_RENDEZVOUS_PORT"], "4000");
  EXPECT_EQ(env["HVDRUN_SECRET"], "ab");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(env["HVDRUN_IFACE"], "eth1");
  EXPECT_EQ(env["NCCL_DEBUG"], "INFO");
  auto strs = env_to_strings(env);
  EXPECT_NE(std::find(strs.begin(), strs.end(), "HOROVOD_RANK=5"), strs.end());
}

TEST(WorkerEnv, HorovodGlooVariablesOnlyWithHorovod) {
  std::map<std::string, std::string> launcher{{"HOROVOD_CONTROLLER", "mpi"}, {"HOROVOD_GLOO_IFACE", "x"}};
  JobEnv job;
  job.rendezvous_addr = "10.0.0.1";
  job.rendezvous_port = 4000;
  RankInfo r{1, 2, 1, 2, 0, 1, 0, "localhost"};
  auto plain = build_worker_env({}, {}, job, r, 0);
  EXPECT_EQ(plain.count("HOROVOD_GLOO_RENDEZVOUS_ADDR"), 0u);
  EXPECT_EQ(plain.count("HOROVOD_CONTROLLER"), 0u);
  job.horovod_port = 4001;
  job.gloo_iface = "lo";
  // As horovodrun --gloo: its variables win over the user's and -x.
  auto env = build_worker_env(launcher, {{"HOROVOD_CPU_OPERATIONS", "mpi"}}, job, r, 0);
  EXPECT_EQ(env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["HOROVOD_GLOO_RENDEZVOUS_PORT"], "4001");
  EXPECT_EQ(env["HOROVOD_CONTROLLER"], "gloo");
  EXPECT_EQ(env["HOROVOD_CPU_OPERATIONS"], "gloo");
  EXPECT_EQ(env["HOROVOD_GLOO_IFACE"], "lo");
  EXPECT_EQ(env["HOROVOD_HOSTNAME"], "localhost");
  EXPECT_EQ(env["HOROVOD_RANK"], "1");
  EXPECT_EQ(env["HVDRUN_RENDEZVOUS_PORT"], "4000");  // hvdrun's own stays
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "lo");        // horovodrun's default too, the user's wins:
  EXPECT_EQ(build_worker_env({{"NCCL_SOCKET_IFNAME", "ib0"}}, {}, job, r, 0)["NCCL_SOCKET_IFNAME"], "ib0");
  job.gloo_iface = "";
  EXPECT_EQ(build_worker_env({}, {}, job, r, 0).count("HOROVOD_GLOO_IFACE"), 0u);
}

TEST(WorkerEnv, NcclDebugIsLeftAloneUnlessAsked) {
  JobEnv job;
  RankInfo r{0, 1, 0, 1, 0, 1, 0, "localhost"};
  auto env = build_worker_env({{"NCCL_DEBUG", "WARN"}}, {}, job, r, 0);
  EXPECT_EQ(env["NCCL_DEBUG"], "WARN");
  EXPECT_EQ(env.count("NCCL_SOCKET_IFNAME"), 0u);
}

TEST(WorkerEnv, HorovodCompatShimGoesFirstOnPythonPath) {
  RankInfo r{0, 1, 0, 1, 0, 1, 0, "localhost"};
  JobEnv job;
  EXPECT_EQ(build_worker_env({{"PYTHONPATH", "/a"}}, {}, job, r, 0)["PYTHONPATH"], "/a");  // off: untouched
  EXPECT_EQ(build_worker_env({}, {}, job, r, 0).count("PYTHONPATH"), 0u);
  job.python_path_prepend = "/p/share/hvdrun/horovod-compat";
  EXPECT_EQ(build_worker_env({}, {}, job, r, 0)["PYTHONPATH"], "/p/share/hvdrun/horovod-compat");
  EXPECT_EQ(build_worker_env({{"PYTHONPATH", "/a"}}, {}, job, r, 0)["PYTHONPATH"],
            "/p/share/hvdrun/horovod-compat:/a");
  // Even before a PYTHONPATH given with -x.
  EXPECT_EQ(build_worker_env({{"PYTHONPATH", "/a"}}, {{"PYTHONPATH", "/x"}}, job, r, 0)["PYTHONPATH"],
            "/p/share/hvdrun/horovod-compat:/x");
}

TEST(WorkerEnv, EnvOverrides) {
  std::map<std::string, std::string> launcher{{"A", "1"}};
  auto r = parse_env_overrides({"A", "B=2", "C="}, launcher);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].value, "1");
  EXPECT_EQ((*r)[1].value, "2");
  EXPECT_EQ((*r)[2].value, "");
  auto missing = parse_env_overrides({"NOPE"}, launcher);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "-x 'NOPE': NOPE is not set in hvdrun's environment; use -x NOPE=VALUE");
  EXPECT_FALSE(parse_env_overrides({"1A=2"}, launcher).ok());
  EXPECT_FALSE(parse_env_overrides({"=2"}, launcher).ok());
  EXPECT_FALSE(parse_env_overrides({"A-B=2"}, launcher).ok());
}

}  // namespace hvdrun

namespace hvdrun {

// -x > the user's environment > hvdrun's defaults (issue 16.4): an exported or -x
// NCCL_SOCKET_IFNAME survives hvdrun knowing an interface.
TEST(WorkerEnv, PrecedenceXThenUserThenDefaults) {
  JobEnv job;
  job.iface = "eth1";
  RankInfo r{0, 1, 0, 1, 0, 1, 0, "localhost"};
  // Defaults where the user says nothing.
  auto d = build_worker_env({}, {}, job, r, 0);
  EXPECT_EQ(d["NCCL_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(d["GLOO_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(d["PYTHONUNBUFFERED"], "1");
  // The user's environment beats the defaults.
  auto u = build_worker_env({{"NCCL_SOCKET_IFNAME", "ib0"}, {"GLOO_SOCKET_IFNAME", "ib1"}, {"PYTHONUNBUFFERED", "0"}},
                            {}, job, r, 0);
  EXPECT_EQ(u["NCCL_SOCKET_IFNAME"], "ib0");
  EXPECT_EQ(u["GLOO_SOCKET_IFNAME"], "ib1");
  EXPECT_EQ(u["PYTHONUNBUFFERED"], "0");
  // -x beats both; flags sit between the user's environment and -x.
  job.flag_env = {{"HOROVOD_FUSION_THRESHOLD", "1024"}, {"NCCL_SOCKET_IFNAME", "flag0"}};
  auto x = build_worker_env({{"NCCL_SOCKET_IFNAME", "ib0"}, {"HOROVOD_FUSION_THRESHOLD", "7"}},
                            {{"NCCL_SOCKET_IFNAME", "ib9"}}, job, r, 0);
  EXPECT_EQ(x["NCCL_SOCKET_IFNAME"], "ib9");
  EXPECT_EQ(x["GLOO_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(x["HOROVOD_FUSION_THRESHOLD"], "1024");
  // The contract is hvdrun's whatever -x says.
  auto c = build_worker_env({}, {{"HOROVOD_RANK", "7"}, {"HVDRUN_IFACE", "zz"}}, job, r, 0);
  EXPECT_EQ(c["HOROVOD_RANK"], "0");
  EXPECT_EQ(c["HVDRUN_IFACE"], "eth1");
}

}  // namespace hvdrun

namespace hvdrun {

// What the workers see of a tunable, as hvdrun resolves it for the timeline it checks and
// merges: -x (the last one) over hvdrun's environment, our spelling over Horovod's.
TEST(WorkerEnv, WorkerTunableIsWhatTheWorkersSee) {
  std::map<std::string, std::string> launcher{{"HOROVOD_TIMELINE", "/h.json"}};
  EXPECT_EQ(worker_tunable(launcher, {}, "HVDRUN_TIMELINE"), "/h.json");
  EXPECT_EQ(worker_tunable({}, {}, "HVDRUN_TIMELINE"), "");
  std::vector<EnvOverride> x{{"HVDRUN_TIMELINE", "/a.json"}, {"HVDRUN_TIMELINE", "/b.json"}};
  EXPECT_EQ(worker_tunable(launcher, x, "HVDRUN_TIMELINE"), "/b.json");
  EXPECT_EQ(worker_tunable({}, {{"HOROVOD_TIMELINE", "rel.json"}}, "HVDRUN_TIMELINE"), "rel.json");
  // Ours set to "" (even by -x) turns it off, as tunable_if_set does in the workers.
  EXPECT_EQ(worker_tunable(launcher, {{"HVDRUN_TIMELINE", ""}}, "HVDRUN_TIMELINE"), "");
  EXPECT_EQ(worker_tunable({}, {}, "HVDRUN_STALL_CHECK_TIME_SECONDS"), "60");
}

}  // namespace hvdrun
