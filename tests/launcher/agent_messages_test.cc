// The JSON messages between hvdrun and its agents (launcher/agent_messages): the job, the
// hello and the attach round trip; the agent's reports (kSetupError, kFailed, kExited,
// kSlurmSignal, kStdinTaken, kDone): the bytes on the wire are the ones agents of this
// version have always sent, and what a malformed report carries takes its field's default.
#include "launcher/agent_messages.h"

#include <gtest/gtest.h>

#include "launcher/agent_wire.h"

namespace hvdrun {
namespace {

TEST(AgentMessages, JobHelloAndAttachRoundTrip) {
  AgentJob job;
  job.host = "node2";
  job.cwd = "/work dir";
  job.kill_grace = 2.5;
  job.ranks = {{4, {"python", "train.py"}, {"A=1", "HVDRUN_SECRET=ab"}}, {5, {"python"}, {}}};
  auto back = decode_job(encode_job(job));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->host, "node2");
  EXPECT_EQ(back->cwd, "/work dir");
  EXPECT_DOUBLE_EQ(back->kill_grace, 2.5);
  ASSERT_EQ(back->ranks.size(), 2u);
  EXPECT_EQ(back->ranks[0].rank, 4);
  EXPECT_EQ(back->ranks[0].env[1], "HVDRUN_SECRET=ab");
  EXPECT_FALSE(decode_job("{\"host\": 1}").ok());
  EXPECT_FALSE(decode_job("not json").ok());

  AgentHello h;
  h.version = "0.1.0";
  h.node = "n3";
  h.network_stack = "boot:4026531840";
  h.ifaces = {{"lo", "127.0.0.1", false, 8}, {"ib0", "10.0.0.2", false, 16}, {"ib0", "fd00::2", true, 64}};
  h.free_port = 40000;
  auto hb = decode_hello(encode_hello(h));
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->node, "n3");
  EXPECT_EQ(hb->ifaces, h.ifaces);
  EXPECT_EQ(hb->free_port, 40000);
  EXPECT_EQ(hb->launcher_addr, "");
  // Another version's hello is read far enough to refuse it by its version.
  auto old = decode_hello(R"({"launcher_addr": "10.0.0.1", "version": "0.0.1"})");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->version, "0.0.1");
  EXPECT_FALSE(decode_hello(R"({"version": "1", "ifaces": [{"name": "x", "addr": "1.2.3.4", "prefix": 33}]})").ok());
  EXPECT_FALSE(decode_hello("{}").ok());

  auto at = decode_attach(encode_attach({"00ff", 3, "n4"}));
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->token, "00ff");
  EXPECT_EQ(at->task, 3);
  EXPECT_EQ(at->node, "n4");
  EXPECT_FALSE(decode_attach(R"({"token": 1})").ok());
}

TEST(AgentMessages, HelloCarriesTheHostsFactsAndReadyThePythons) {
  AgentHello h;
  h.version = "0.2.0";
  h.facts.version = "0.2.0";
  h.facts.protocol = agentwire::kProtocol;
  h.facts.build = "tcp shm cuda-12.2 nccl-2.18.3";
  h.facts.gpu_driver = "535.104.05";
  h.facts.gpus = {{"NVIDIA H100", "0000:19:00.0", 0}, {"NVIDIA H100", "0000:9a:00.0", -1}};
  h.facts.ifaces = {{"eth0", true}, {"ib0", false}};
  h.facts.shm_free = 1ll << 40;
  h.facts.nofile = 1048576;
  h.facts.nproc = -1;
  h.facts.clock = 1.7e9 + 0.25;
  auto back = decode_hello(encode_hello(h));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->facts, h.facts);
  // An agent from before the facts: its version, protocol 0 (it cannot talk to this one).
  auto old = decode_hello(R"({"version": "0.0.1", "facts": {"gpus": 3, "ifaces": [1, {"name": 2}]}})");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->facts.version, "0.0.1");
  EXPECT_EQ(old->facts.protocol, 0);
  EXPECT_TRUE(old->facts.gpus.empty());
  EXPECT_EQ(old->facts.ifaces, (std::vector<IfaceFacts>{{"", false}}));
  EXPECT_EQ(decode_hello(R"({"version": "0.0.1"})")->facts.nofile, -1);

  EXPECT_EQ(encode_ready({}), "");  // kReady as it always was for no Python command
  EXPECT_FALSE(decode_ready("")->has_python);
  AgentReady r{true, {"3.11.2", "2.1.0", "12.1", ""}};
  auto rb = decode_ready(encode_ready(r));
  ASSERT_TRUE(rb.ok());
  EXPECT_TRUE(rb->has_python);
  EXPECT_EQ(rb->python, r.python);
  EXPECT_EQ(decode_ready(R"({"python": 3, "error": "python3 failed"})")->python, (PythonFacts{"", "", "", "python3 failed"}));
  EXPECT_FALSE(decode_ready("[").ok());

  AgentJob job;
  job.ranks = {{0, {"python3"}, {}}};
  job.python_facts = true;
  EXPECT_TRUE(decode_job(encode_job(job))->python_facts);
  // After the start (kPythonFacts): on the wire only when asked, so an older agent's job is as it was.
  EXPECT_EQ(encode_job(job).find("after_start"), std::string::npos);
  EXPECT_FALSE(decode_job(encode_job(job))->python_facts_after_start);
  job.python_facts_after_start = true;
  EXPECT_TRUE(decode_job(encode_job(job))->python_facts_after_start);
}

TEST(AgentMessages, ReportsKeepTheirBytesOnTheWire) {
  EXPECT_EQ(encode_setup_error({"no such file", 127, ErrorKind::kNotFound}),
            "{\"code\":127,\"kind\":" + std::to_string(static_cast<int>(ErrorKind::kNotFound)) +
                ",\"message\":\"no such file\"}");
  EXPECT_EQ(encode_failed({3, 9}), "{\"rank\":3,\"status\":9}");
  EXPECT_EQ(encode_exited({1}), "{\"rank\":1}");
  EXPECT_EQ(encode_slurm_signal({15}), "{\"signal\":15}");
  EXPECT_EQ(encode_stdin_taken({4096, false}), "{\"bytes\":4096}");
  EXPECT_EQ(encode_stdin_taken({0, true}), "{\"closed\":true}");
  EXPECT_EQ(encode_done({143, 0}), "{\"code\":143}");
  EXPECT_EQ(encode_done({1, 31}), "{\"code\":1,\"lost_contact_s\":31}");
  EXPECT_EQ(agentwire::encode_signal(19), agentwire::encode(agentwire::Type::kSignal, "\x13"));
}

TEST(AgentMessages, ReportsRoundTrip) {
  auto se = decode_setup_error(encode_setup_error({"cwd gone", 3, ErrorKind::kLaunchFailed}));
  ASSERT_TRUE(se);
  EXPECT_EQ(se->message, "cwd gone");
  EXPECT_EQ(se->code, 3);
  EXPECT_EQ(se->kind, ErrorKind::kLaunchFailed);
  auto f = decode_failed(encode_failed({2, 137 << 8}));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->status, 137 << 8);
  auto t = decode_stdin_taken(encode_stdin_taken({1u << 20, false}));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bytes, 1u << 20);
  EXPECT_FALSE(t->closed);
  auto d = decode_done(encode_done({6, 40}));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->code, 6);
  EXPECT_EQ(d->lost_contact_s, 40);
  auto sig = agentwire::decode_signal(agentwire::encode_signal(18).substr(5));
  ASSERT_TRUE(sig);
  EXPECT_EQ(*sig, 18);
}

// A field of another type or out of range takes its default; a payload that is no JSON
// object is an error naming the report.
TEST(AgentMessages, MalformedFieldsTakeTheirDefaults) {
  auto d = decode_done("{\"code\":18446744073709551615,\"lost_contact_s\":99999999999}");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->code, 0);  // not 2^64 - 1 read as -1
  EXPECT_EQ(d->lost_contact_s, 0);
  auto f = decode_failed("{\"rank\":\"0\",\"status\":1.5}");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, -1);
  EXPECT_EQ(f->status, 1 << 8);
  auto t = decode_stdin_taken("{\"bytes\":\"many\",\"closed\":1}");
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->closed);
  EXPECT_EQ(t->bytes, 0u);
  auto se = decode_setup_error("{\"kind\":99999,\"message\":[]}");
  ASSERT_TRUE(se);
  EXPECT_EQ(se->kind, ErrorKind::kLaunchFailed);
  EXPECT_EQ(se->message, "setup failed");
  EXPECT_EQ(se->code, 3);
  auto bad = decode_exited("[1]");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "bad exited rank report from the agent: not a JSON object");
  EXPECT_FALSE(decode_slurm_signal("{\"signal\":"));
  EXPECT_FALSE(decode_slurm_signal("{\"signal\":1e400}"));  // no JSON number nlohmann takes
  EXPECT_FALSE(agentwire::decode_signal(""));
  EXPECT_FALSE(agentwire::decode_signal("ab"));
}

// An elastic job's frames: the job says so, kSpawn/kKill/kEnded round trip and keep their bytes.
TEST(AgentMessages, ElasticSpawnKillAndEndedRoundTrip) {
  AgentJob job;
  job.ranks = {{0, {"python"}, {}}};
  EXPECT_EQ(encode_job(job).find("elastic"), std::string::npos);  // (an older agent reads the same job)
  job.elastic = true;
  EXPECT_TRUE(decode_job(encode_job(job))->elastic);
  auto s = decode_spawn(encode_spawn({8388609, {"python3", "train.py"}, {"HVDRUN_ELASTIC_SLOT=h1:0"}}));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->id, 8388609);
  EXPECT_EQ(s->argv, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(s->env, (std::vector<std::string>{"HVDRUN_ELASTIC_SLOT=h1:0"}));
  EXPECT_FALSE(decode_spawn(R"({"id": 1, "argv": [], "env": []})"));  // no command
  EXPECT_FALSE(decode_spawn(R"({"id": "1"})"));
  EXPECT_EQ(encode_kill({3, 9}), "{\"id\":3,\"signal\":9}");
  EXPECT_EQ(encode_ended({3, 9}), "{\"id\":3,\"status\":9}");
  auto k = decode_kill(encode_kill({5, 15}));
  ASSERT_TRUE(k);
  EXPECT_EQ(k->id, 5);
  EXPECT_EQ(k->signal, 15);
  auto e = decode_ended("{\"id\":7,\"status\":\"x\"}");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 7);
  EXPECT_EQ(e->status, 1 << 8);  // malformed: a failure, not success
}

}  // namespace
}  // namespace hvdrun
