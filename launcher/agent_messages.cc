#include "launcher/agent_messages.h"

#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace hvdrun {
namespace {

// A field of an agent's report, or `fallback` when it is missing, of another type or out of
// T's range. (Neither json::value, which throws on a type mismatch, nor json::get, which
// wraps 2^64 - 1 to -1, nor nlohmann's NLOHMANN_DEFINE_TYPE macros built on them, do this.)
template <class T>
T field(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>)
    return it->is_boolean() ? it->template get<bool>() : fallback;
  else if constexpr (std::is_same_v<T, std::string>)
    return it->is_string() ? it->template get<std::string>() : fallback;
  else if constexpr (std::is_unsigned_v<T>)
    return it->is_number_unsigned() ? it->template get<T>() : fallback;
  else if (it->is_number_unsigned())  // (compared as signed, 2^64 - 1 passed as -1)
    return it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max()) ? it->template get<T>()
                                                                                                 : fallback;
  else
    return it->is_number_integer() && it->template get<int64_t>() >= std::numeric_limits<T>::min() &&
                   it->template get<int64_t>() <= std::numeric_limits<T>::max()
               ? it->template get<T>()
               : fallback;
}

// A report of type T filled from its JSON object by fill(j, t), or an error naming the
// report when the payload is no JSON object.
template <class T, class Fill>
Result<T> decode_report(const std::string& text, const char* what, Fill fill) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return make_error(ErrorKind::kMalformed,
                                        std::string("bad ") + what + " report from the agent: not a JSON object");
  T t;
  fill(j, t);
  return t;
}

nlohmann::json facts_json(const HostFacts& f) {
  nlohmann::json gpus = nlohmann::json::array(), ifaces = nlohmann::json::array();
  for (const auto& g : f.gpus) gpus.push_back({{"model", g.model}, {"bus", g.bus}, {"numa", g.numa_node}});
  for (const auto& i : f.ifaces) ifaces.push_back({{"name", i.name}, {"up", i.up}});
  return {{"protocol", f.protocol}, {"build", f.build}, {"driver", f.gpu_driver}, {"gpus", gpus},
          {"ifaces", ifaces}, {"shm_free", f.shm_free}, {"nofile", f.nofile}, {"nproc", f.nproc}, {"clock", f.clock}};
}

// A field that is missing or of another type takes its default, as for the reports.
HostFacts facts_of(const nlohmann::json& j, const std::string& version) {
  HostFacts f;
  f.version = version;
  if (!j.is_object()) return f;
  f.protocol = field(j, "protocol", 0);
  f.build = field(j, "build", f.build);
  f.gpu_driver = field(j, "driver", f.gpu_driver);
  for (const auto& g : j.contains("gpus") && j["gpus"].is_array() ? j["gpus"] : nlohmann::json::array())
    if (g.is_object()) f.gpus.push_back({field(g, "model", std::string()), field(g, "bus", std::string()), field(g, "numa", -1)});
  for (const auto& i : j.contains("ifaces") && j["ifaces"].is_array() ? j["ifaces"] : nlohmann::json::array())
    if (i.is_object()) f.ifaces.push_back({field(i, "name", std::string()), field(i, "up", false)});
  f.shm_free = field(j, "shm_free", f.shm_free);
  f.nofile = field(j, "nofile", f.nofile);
  f.nproc = field(j, "nproc", f.nproc);
  auto clock = j.find("clock");
  f.clock = clock != j.end() && clock->is_number() ? clock->get<double>() : 0;
  return f;
}

}  // namespace

std::string encode_job(const AgentJob& job) {
  nlohmann::json j;
  j["host"] = job.host;
  j["cwd"] = job.cwd;
  j["kill_grace"] = job.kill_grace;
  j["heartbeat_timeout"] = job.heartbeat_timeout;
  j["stdin"] = job.stdin_to_rank0;
  j["python_facts"] = job.python_facts;
  if (job.python_facts_after_start) j["python_facts_after_start"] = true;
  j["bind_to"] = job.bind_to;
  if (job.elastic) j["elastic"] = true;
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : job.ranks) j["ranks"].push_back({{"rank", r.rank}, {"argv", r.argv}, {"env", r.env}});
  return j.dump();
}

Result<AgentJob> decode_job(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    AgentJob job;
    job.host = j.at("host").get<std::string>();
    job.cwd = j.at("cwd").get<std::string>();
    job.kill_grace = j.at("kill_grace").get<double>();
    job.heartbeat_timeout = j.at("heartbeat_timeout").get<double>();
    job.stdin_to_rank0 = j.at("stdin").get<bool>();
    job.python_facts = j.value("python_facts", false);
    job.python_facts_after_start = j.value("python_facts_after_start", false);
    job.bind_to = j.value("bind_to", std::string("none"));  // an older hvdrun's job: no binding
    job.elastic = j.value("elastic", false);
    for (const auto& r : j.at("ranks"))
      job.ranks.push_back({r.at("rank").get<int>(), r.at("argv").get<std::vector<std::string>>(),
                           r.at("env").get<std::vector<std::string>>()});
    if (job.ranks.empty() || job.ranks[0].argv.empty()) return make_error(ErrorKind::kMalformed,
                                                                          "job without ranks or command");
    return job;
  } catch (const std::exception& e) {
    return make_error(ErrorKind::kMalformed, std::string("bad job description: ") + e.what());
  }
}

std::string encode_hello(const AgentHello& h) {
  nlohmann::json ifaces = nlohmann::json::array();
  for (const auto& a : h.ifaces) ifaces.push_back({{"name", a.iface}, {"addr", a.addr}, {"prefix", a.prefix}});
  return nlohmann::json{{"version", h.version},
                        {"node", h.node},
                        {"network_stack", h.network_stack},
                        {"ifaces", ifaces},
                        {"free_port", h.free_port},
                        {"launcher_addr", h.launcher_addr},
                        {"host_addr", h.host_addr},
                        {"facts", facts_json(h.facts)}}
      .dump();
}

Result<AgentHello> decode_hello(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    AgentHello h;
    // The version first: an agent of another version is refused by it, whatever else it sent.
    h.version = j.at("version").get<std::string>();
    h.node = j.value("node", "");
    h.network_stack = j.value("network_stack", "");
    if (j.contains("ifaces"))
      for (const auto& a : j.at("ifaces")) {
        InterfaceAddress ia;
        ia.iface = a.at("name").get<std::string>();
        ia.addr = a.at("addr").get<std::string>();
        ia.v6 = ia.addr.find(':') != std::string::npos;
        ia.prefix = a.at("prefix").get<int>();
        if (ia.prefix < 0 || ia.prefix > (ia.v6 ? 128 : 32)) return make_error(ErrorKind::kMalformed,
                                                                               "bad hello from the agent: prefix out of range");
        h.ifaces.push_back(std::move(ia));
      }
    h.free_port = j.value("free_port", 0);
    h.launcher_addr = j.value("launcher_addr", "");
    h.host_addr = j.value("host_addr", "");
    h.facts = facts_of(j.contains("facts") ? j["facts"] : nlohmann::json(), h.version);
    return h;
  } catch (const std::exception& e) {
    return make_error(ErrorKind::kMalformed, std::string("bad hello from the agent: ") + e.what());
  }
}

std::string encode_ready(const AgentReady& r) {
  if (!r.has_python) return "";
  const PythonFacts& p = r.python;
  return nlohmann::json{{"python", p.python}, {"torch", p.torch}, {"torch_cuda", p.torch_cuda}, {"error", p.error}}.dump();
}

Result<AgentReady> decode_ready(const std::string& text) {
  if (text.empty()) return AgentReady{};
  return decode_report<AgentReady>(text, "ready", [](const nlohmann::json& j, AgentReady& v) {
    v.has_python = true;
    v.python = {field(j, "python", std::string()), field(j, "torch", std::string()),
                field(j, "torch_cuda", std::string()), field(j, "error", std::string())};
  });
}

std::string encode_attach(const AgentAttach& a) {
  return nlohmann::json{{"token", a.token}, {"task", a.task}, {"node", a.node}}.dump();
}

Result<AgentAttach> decode_attach(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    AgentAttach a;
    a.token = j.at("token").get<std::string>();
    a.task = j.at("task").get<int>();
    a.node = j.at("node").get<std::string>();
    return a;
  } catch (const std::exception& e) {
    return make_error(ErrorKind::kMalformed, std::string("bad attach message from an agent: ") + e.what());
  }
}

std::string encode_setup_error(const AgentSetupError& e) {
  return nlohmann::json{{"message", e.message}, {"code", e.code}, {"kind", static_cast<int>(e.kind)}}.dump();
}

Result<AgentSetupError> decode_setup_error(const std::string& text) {
  return decode_report<AgentSetupError>(text, "setup error", [](const nlohmann::json& j, AgentSetupError& v) {
    v.message = field(j, "message", v.message);
    v.code = field(j, "code", v.code);
    v.kind = error_kind_from_int(field(j, "kind", 0), ErrorKind::kLaunchFailed);
  });
}

std::string encode_failed(const AgentFailed& f) { return nlohmann::json{{"rank", f.rank}, {"status", f.status}}.dump(); }

Result<AgentFailed> decode_failed(const std::string& text) {
  return decode_report<AgentFailed>(text, "failed rank", [](const nlohmann::json& j, AgentFailed& v) {
    v.rank = field(j, "rank", v.rank);
    v.status = field(j, "status", v.status);
  });
}

std::string encode_exited(const AgentExited& e) { return nlohmann::json{{"rank", e.rank}}.dump(); }

Result<AgentExited> decode_exited(const std::string& text) {
  return decode_report<AgentExited>(text, "exited rank", [](const nlohmann::json& j, AgentExited& v) {
    v.rank = field(j, "rank", v.rank);
  });
}

std::string encode_slurm_signal(const AgentSlurmSignal& s) { return nlohmann::json{{"signal", s.signal}}.dump(); }

Result<AgentSlurmSignal> decode_slurm_signal(const std::string& text) {
  return decode_report<AgentSlurmSignal>(text, "Slurm signal", [](const nlohmann::json& j, AgentSlurmSignal& v) {
    v.signal = field(j, "signal", v.signal);
  });
}

std::string encode_stdin_taken(const AgentStdinTaken& t) {
  if (t.closed) return nlohmann::json{{"closed", true}}.dump();
  return nlohmann::json{{"bytes", t.bytes}}.dump();
}

Result<AgentStdinTaken> decode_stdin_taken(const std::string& text) {
  return decode_report<AgentStdinTaken>(text, "stdin taken", [](const nlohmann::json& j, AgentStdinTaken& v) {
    v.closed = field(j, "closed", false);
    if (!v.closed) v.bytes = field(j, "bytes", uint64_t{0});
  });
}

std::string encode_done(const AgentDone& d) {
  nlohmann::json j{{"code", d.code}};
  if (d.lost_contact_s > 0) j["lost_contact_s"] = d.lost_contact_s;
  return j.dump();
}

Result<AgentDone> decode_done(const std::string& text) {
  return decode_report<AgentDone>(text, "done", [](const nlohmann::json& j, AgentDone& v) {
    v.code = field(j, "code", v.code);
    v.lost_contact_s = field(j, "lost_contact_s", v.lost_contact_s);
  });
}

std::string encode_spawn(const AgentSpawn& s) {
  return nlohmann::json{{"id", s.id}, {"argv", s.argv}, {"env", s.env}}.dump();
}

Result<AgentSpawn> decode_spawn(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    AgentSpawn s{j.at("id").get<int>(), j.at("argv").get<std::vector<std::string>>(),
                 j.at("env").get<std::vector<std::string>>()};
    if (s.argv.empty()) return make_error(ErrorKind::kMalformed, "spawn without a command");
    return s;
  } catch (const std::exception& e) {
    return make_error(ErrorKind::kMalformed, std::string("bad spawn message: ") + e.what());
  }
}

std::string encode_kill(const AgentKill& k) { return nlohmann::json{{"id", k.id}, {"signal", k.signal}}.dump(); }

Result<AgentKill> decode_kill(const std::string& text) {
  return decode_report<AgentKill>(text, "kill", [](const nlohmann::json& j, AgentKill& v) {
    v.id = field(j, "id", v.id);
    v.signal = field(j, "signal", v.signal);
  });
}

std::string encode_ended(const AgentEnded& e) { return nlohmann::json{{"id", e.id}, {"status", e.status}}.dump(); }

Result<AgentEnded> decode_ended(const std::string& text) {
  return decode_report<AgentEnded>(text, "ended worker", [](const nlohmann::json& j, AgentEnded& v) {
    v.id = field(j, "id", v.id);
    v.status = field(j, "status", v.status);
  });
}

}  // namespace hvdrun
