#include "collectives/runtime.h"

#include <cstdlib>
#include <spdlog/spdlog.h>

#include "common/strings.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"
#include "rendezvous/auth.h"

namespace hvdrun {
namespace {

Error err(int code, std::string message) { return Error{std::move(message), code}; }

}  // namespace

Runtime& Runtime::instance() {
  static Runtime* rt = new Runtime();  // never destroyed: safe from exit-time ordering
  return *rt;
}

Result<RankView> rank_view_from_env(const std::function<const char*(const char*)>& getenv_fn) {
  RankView v;
  struct Field {
    const char* name;
    int* out;
  } fields[] = {{"HOROVOD_RANK", &v.rank},          {"HOROVOD_SIZE", &v.size},
                {"HOROVOD_LOCAL_RANK", &v.local_rank}, {"HOROVOD_LOCAL_SIZE", &v.local_size},
                {"HOROVOD_CROSS_RANK", &v.cross_rank}, {"HOROVOD_CROSS_SIZE", &v.cross_size}};
  for (auto& f : fields) {
    const char* s = getenv_fn(f.name);
    if (!s) return err(HVD_ERR_RENDEZVOUS, std::string(f.name) + " is not set (start the program with hvdrun)");
    auto n = parse_int(s, f.name, 0, 1 << 24);
    if (!n) return err(HVD_ERR_INVALID_ARGUMENT, n.error().message);
    *f.out = static_cast<int>(*n);
  }
  if (v.size < 1 || v.rank >= v.size || v.local_rank >= v.local_size || v.cross_rank >= v.cross_size)
    return err(HVD_ERR_INVALID_ARGUMENT, "inconsistent HOROVOD_* rank variables (rank " + std::to_string(v.rank) +
                                             " of " + std::to_string(v.size) + ")");
  const char* host = getenv_fn("HOROVOD_HOSTNAME");
  v.host = host ? host : "localhost";
  return v;
}

Status Runtime::init() {
  if (initialized_) return {};
  const char* addr = std::getenv("HVDRUN_RENDEZVOUS_ADDR");
  if (!addr) {
    // Not started by hvdrun: a job of one, as Horovod does.
    view_ = RankView{};
    initialized_ = true;
    return {};
  }
  auto view = rank_view_from_env([](const char* n) { return std::getenv(n); });
  if (!view) return view.error();
  auto port = parse_int(tunable_string("HVDRUN_RENDEZVOUS_PORT"), "HVDRUN_RENDEZVOUS_PORT", 1, 65535);
  if (!port) return err(HVD_ERR_RENDEZVOUS, port.error().message);
  auto secret = rdv::secret_from_hex(tunable_string("HVDRUN_SECRET"));
  if (!secret) return err(HVD_ERR_AUTH, secret.error().message);
  double start_timeout = tunable_double("HVDRUN_START_TIMEOUT");
  auto deadline = rdv::Clock::now() + std::chrono::duration_cast<rdv::Clock::duration>(
                                          std::chrono::duration<double>(start_timeout));

  auto client = rdv::Client::connect(addr, static_cast<int>(*port), *secret, deadline);
  if (!client) {
    bool auth = client.error().message.find("authentication") != std::string::npos;
    return err(auth ? HVD_ERR_AUTH : HVD_ERR_RENDEZVOUS,
               "rank " + std::to_string(view->rank) + ": " + client.error().message);
  }
  // The data plane listens on the interface hvdrun chose, else on the address the
  // rendezvous connection leaves from (which the other hosts can route to).
  std::string iface = tunable_string("HVDRUN_IFACE");
  std::string advertise = client->local_address();
  if (!iface.empty()) {
    auto a = transport::interface_address(iface);
    if (!a) return err(HVD_ERR_INVALID_ARGUMENT, "rank " + std::to_string(view->rank) + ": " + a.error().message);
    advertise = *a;
  }
  auto listener = transport::listen_tcp(iface.empty() ? "" : advertise, advertise);
  if (!listener) return err(HVD_ERR_INTERNAL, "rank " + std::to_string(view->rank) + ": " + listener.error().message);

  rdv::RegisterRequest req{view->rank, view->size, view->host, listener->addr, listener->port};
  auto reg = client->register_rank(req, deadline);
  if (!reg) {
    int code = reg.error().code == ETIMEDOUT ? HVD_ERR_TIMEOUT : HVD_ERR_RENDEZVOUS;
    return err(code, "rank " + std::to_string(view->rank) + ": " + reg.error().message);
  }
  view_ = *view;
  secret_ = *secret;
  client_.emplace(std::move(*client));
  listener_ = std::move(*listener);
  ring_ = *reg;
  initialized_ = true;
  spdlog::debug("rank {}: registered; left {} at {}:{}, right {} at {}:{}", view_.rank, ring_.left.rank,
                ring_.left.addr, ring_.left.port, ring_.right.rank, ring_.right.addr, ring_.right.port);
  return {};
}

Status Runtime::shutdown() {
  if (!initialized_) return {};
  client_.reset();
  listener_ = transport::Listener{};
  initialized_ = false;
  return {};
}

Status Runtime::barrier() {
  if (!initialized_) return err(HVD_ERR_NOT_INITIALIZED, "hvd_barrier: call hvd_init() first");
  if (view_.size == 1) return {};
  auto s = client_->barrier("hvd/barrier/" + std::to_string(barrier_seq_++), view_.size,
                            tunable_double("HVDRUN_TIMEOUT"));
  if (!s) return err(s.error().code == ETIMEDOUT ? HVD_ERR_TIMEOUT : HVD_ERR_RENDEZVOUS,
                     "rank " + std::to_string(view_.rank) + ": barrier: " + s.error().message);
  return {};
}

void Runtime::report_fatal(const std::string& message) {
  if (client_) (void)client_->report_fatal(message);
}

}  // namespace hvdrun
