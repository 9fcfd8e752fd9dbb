#include "launcher/agent_messages.h"

#include <nlohmann/json.hpp>

namespace hvdrun {

std::string encode_job(const AgentJob& job) {
  nlohmann::json j;
  j["host"] = job.host;
  j["cwd"] = job.cwd;
  j["kill_grace"] = job.kill_grace;
  j["heartbeat_timeout"] = job.heartbeat_timeout;
  j["stdin"] = job.stdin_to_rank0;
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
    for (const auto& r : j.at("ranks"))
      job.ranks.push_back({r.at("rank").get<int>(), r.at("argv").get<std::vector<std::string>>(),
                           r.at("env").get<std::vector<std::string>>()});
    if (job.ranks.empty() || job.ranks[0].argv.empty()) return make_error("job without ranks or command");
    return job;
  } catch (const std::exception& e) {
    return make_error(std::string("bad job description: ") + e.what());
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
                        {"host_addr", h.host_addr}}
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
        if (ia.prefix < 0 || ia.prefix > (ia.v6 ? 128 : 32)) return make_error("bad hello from the agent: prefix out of range");
        h.ifaces.push_back(std::move(ia));
      }
    h.free_port = j.value("free_port", 0);
    h.launcher_addr = j.value("launcher_addr", "");
    h.host_addr = j.value("host_addr", "");
    return h;
  } catch (const std::exception& e) {
    return make_error(std::string("bad hello from the agent: ") + e.what());
  }
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
    return make_error(std::string("bad attach message from an agent: ") + e.what());
  }
}

}  // namespace hvdrun
