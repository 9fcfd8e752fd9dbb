#include "collectives/runtime.h"

#include <thread>

#include "collectives/dtype.h"
#include "collectives/hierarchy.h"

#include <cstdlib>
#include <spdlog/spdlog.h>

#include "common/deadline.h"
#include "common/net.h"
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
    if (auto s = connect_ring(); !s) return s;
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
  auto deadline = deadline_in(start_timeout);

  auto client = rdv::Client::connect(addr, static_cast<int>(*port), *secret, deadline);
  if (!client) {
    bool auth = client.error().kind == ErrorKind::kAuth;
    return err(auth ? HVD_ERR_AUTH : HVD_ERR_RENDEZVOUS,
               "rank " + std::to_string(view->rank) + ": " + client.error().message);
  }
  // The data plane listens on the interface hvdrun chose, else on the address the
  // rendezvous connection leaves from (which the other hosts can route to).
  std::string iface = tunable_string("HVDRUN_IFACE");
  std::string advertise = client->local_address();
  if (!iface.empty()) {
    auto a = interface_address(iface);
    if (!a) return err(HVD_ERR_INVALID_ARGUMENT, "rank " + std::to_string(view->rank) + ": " + a.error().message);
    advertise = *a;
  }
  auto listener = transport::listen_tcp(iface.empty() ? "" : advertise, advertise);
  if (!listener) return err(HVD_ERR_INTERNAL, "rank " + std::to_string(view->rank) + ": " + listener.error().message);

  // hvdrun owns the start time-out and names the missing ranks when it passes (its clock
  // may restart at the first registration): wait longer than it, so that its message wins.
  rdv::RegisterRequest req{view->rank, view->size, view->host, listener->addr, listener->port};
  auto reg = client->register_rank(req, deadline_in(2 * start_timeout + 10));
  if (!reg) {
    int code = reg.error().code == ETIMEDOUT ? HVD_ERR_TIMEOUT : HVD_ERR_RENDEZVOUS;
    return err(code, "rank " + std::to_string(view->rank) + ": " + reg.error().message);
  }
  view_ = *view;
  secret_ = *secret;
  client_.emplace(std::move(*client));
  listener_ = std::move(*listener);
  ring_ = *reg;
  if (auto s = connect_ring(); !s) {
    client_.reset();
    return s;
  }
  initialized_ = true;
  if (tunable_string("HVDRUN_NCCL_EAGER") == "1") {
    if (auto s = ensure_gpu(); !s) {
      (void)shutdown();
      return s;
    }
  }
  spdlog::debug("rank {}: registered; left {} at {}:{}, right {} at {}:{}", view_.rank, ring_.left.rank,
                ring_.left.addr, ring_.left.port, ring_.right.rank, ring_.right.addr, ring_.right.port);
  return {};
}

// HVDRUN_SPIN_US, where "auto" spins long only when this host's ranks fit its cores: a
// spinning rank must never keep the peer it waits for off the CPU.
int spin_microseconds(int local_ranks) {
  std::string v = tunable_string("HVDRUN_SPIN_US");
  if (v == "auto") return local_ranks <= static_cast<int>(std::thread::hardware_concurrency()) ? 1000 : 50;
  return static_cast<int>(tunable_int("HVDRUN_SPIN_US"));
}

Status Runtime::connect_ring() {
  RingOptions ro;
  ro.timeout_s = tunable_double("HVDRUN_TIMEOUT");
  ro.spin_us = spin_microseconds(view_.local_size);
  ro.segment_bytes = static_cast<size_t>(std::max<long long>(4096, tunable_int("HVDRUN_SEGMENT_BYTES")));
  if (view_.size == 1) {
    ring_comm_ = std::make_unique<Ring>(0, 1, transport::Pair{}, transport::Pair{}, ro);
    return {};
  }
  transport::PairOptions po;
  po.secret = secret_;
  po.self_rank = view_.rank;
  po.buffer_bytes = static_cast<int>(tunable_int("HVDRUN_SOCKET_BUFFER"));
  po.self_host = view_.host;
  po.shm_accept = tunable_string("HVDRUN_SHM") != "0";
  po.shm_ring_bytes = po.shm_accept ? static_cast<size_t>(std::max<long long>(4096, tunable_int("HVDRUN_SHM_RING_BYTES"))) : 0;
  po.deadline = deadline_in(ro.timeout_s);
  // Connect to the right while accepting from the left: every rank does both at once.
  auto address = [](const rdv::PeerInfo& p) { return transport::PeerAddress{p.rank, p.host, p.addr, p.port}; };
  Result<transport::Pair> right = Error{"not connected"};
  std::thread connector([&] { right = transport::connect_pair(address(ring_.right), po); });
  auto left = transport::accept_pair(listener_.fd.get(), address(ring_.left), po);
  connector.join();
  if (!right) return err(HVD_ERR_PEER, "rank " + std::to_string(view_.rank) + ": " + right.error().message);
  if (!left) return err(HVD_ERR_PEER, "rank " + std::to_string(view_.rank) + ": " + left.error().message);
  spdlog::debug("rank {}: to rank {} over {}, from rank {} over {}", view_.rank, ring_.right.rank,
                right->is_shm() ? "shared memory" : "TCP", ring_.left.rank, left->is_shm() ? "shared memory" : "TCP");
  ring_comm_ = std::make_unique<Ring>(view_.rank, view_.size, std::move(*right), std::move(*left), ro);
  ring_comm_->on_fatal = [this](const std::string& m) { report_fatal(m); };
  auto wanted = hierarchy_from_tunables();
  if (!wanted) return err(HVD_ERR_INVALID_ARGUMENT, "rank " + std::to_string(view_.rank) + ": " + wanted.error().message);
  // Several hosts (every rank of such a job sees local_size < size): look at the layout.
  if (wanted->any() && view_.local_size < view_.size && client_) {
    HierarchySetup hs{&*client_, listener_.fd.get(), view_.rank, view_.size, po, ro, ro.timeout_s};
    if (auto s = attach_hierarchy(*ring_comm_, hs, *wanted); !s) return s;
  }
  return {};
}

Status Runtime::ensure_gpu() {
  if (gpu_) return {};
  GpuSetup g;
  g.rank = view_.rank;
  g.size = view_.size;
  g.local_rank = view_.local_rank;
  g.client = client_ ? &*client_ : nullptr;
  g.ring = ring_comm_.get();
  g.timeout_s = tunable_double("HVDRUN_TIMEOUT");
  g.generation = gpu_generation_++;
  g.on_fatal = [this](const std::string& m) { report_fatal(m); };
  auto made = make_gpu_collectives(g);
  if (!made) return made.error();
  gpu_ = std::move(*made);
  return {};
}

Result<bool> Runtime::on_device(const char* what, const void* a, const void* b) {
  auto ma = memory_of(a);
  if (!ma) return ma.error();
  auto mb = b == a ? ma : memory_of(b);
  if (!mb) return mb.error();
  if (*ma != *mb)
    return err(HVD_ERR_INVALID_ARGUMENT, std::string(what) + ": sendbuf is in " +
                                             (*ma == Memory::kDevice ? "device" : "host") + " memory but recvbuf in " +
                                             (*mb == Memory::kDevice ? "device" : "host") +
                                             " memory (both must be on the same side)");
  if (*ma == Memory::kDevice)
    if (auto s = ensure_gpu(); !s) return s.error();
  return *ma == Memory::kDevice;
}

Status Runtime::check_ready(const char* what) {
  if (!initialized_) return err(HVD_ERR_NOT_INITIALIZED, std::string(what) + ": call hvd_init() first");
  return {};
}

// Prefixes the rank. (A mismatch or a time-out has already been told to hvdrun by the
// ring; a lost peer is not: its own exit is the news hvdrun reports.)
Status Runtime::after(Status s) {
  if (s) return s;
  Error e = s.error();
  e.message = "rank " + std::to_string(view_.rank) + ": " + e.message;
  return e;
}

Status Runtime::allreduce(const void* send, void* recv, size_t count, hvd_dtype_t dtype, hvd_op_t op) {
  if (auto s = check_ready("hvd_allreduce"); !s) return s;
  if (!dtype_valid(dtype)) return err(HVD_ERR_INVALID_ARGUMENT, "hvd_allreduce: invalid dtype " + std::to_string(dtype));
  if (!op_valid(op)) return err(HVD_ERR_INVALID_ARGUMENT, "hvd_allreduce: invalid op " + std::to_string(op));
  if (op == HVD_OP_AVERAGE && !dtype_is_float(dtype))
    return err(HVD_ERR_INVALID_ARGUMENT,
               std::string("hvd_allreduce: average is for floating types, not ") + dtype_name(dtype) +
                   " (use sum and divide)");
  if (count && (!send || !recv)) return err(HVD_ERR_INVALID_ARGUMENT, "hvd_allreduce: null buffer");
  if (count) {
    auto dev = on_device("hvd_allreduce", send, recv);
    if (!dev) return after(dev.error());
    if (*dev) return after(gpu_->allreduce(send, recv, count, dtype, op));
  }
  return after(ring_comm_->allreduce(send, recv, count, dtype, op));
}

Status Runtime::broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root) {
  if (auto s = check_ready("hvd_broadcast"); !s) return s;
  if (!dtype_valid(dtype)) return err(HVD_ERR_INVALID_ARGUMENT, "hvd_broadcast: invalid dtype " + std::to_string(dtype));
  if (root < 0 || root >= view_.size)
    return err(HVD_ERR_INVALID_ARGUMENT, "hvd_broadcast: root " + std::to_string(root) + " is not a rank of this job (size " +
                                             std::to_string(view_.size) + ")");
  if (count && !buf) return err(HVD_ERR_INVALID_ARGUMENT, "hvd_broadcast: null buffer");
  if (count) {
    auto dev = on_device("hvd_broadcast", buf, buf);
    if (!dev) return after(dev.error());
    if (*dev) return after(gpu_->broadcast(buf, count, dtype, root));
  }
  return after(ring_comm_->broadcast(buf, count, dtype, root));
}

Status Runtime::allgather(const void* send, void* recv, size_t count, hvd_dtype_t dtype) {
  if (auto s = check_ready("hvd_allgather"); !s) return s;
  if (!dtype_valid(dtype)) return err(HVD_ERR_INVALID_ARGUMENT, "hvd_allgather: invalid dtype " + std::to_string(dtype));
  if (count && (!send || !recv)) return err(HVD_ERR_INVALID_ARGUMENT, "hvd_allgather: null buffer");
  if (count) {
    auto dev = on_device("hvd_allgather", send, recv);
    if (!dev) return after(dev.error());
    if (*dev) return after(gpu_->allgather(send, recv, count, dtype));
  }
  return after(ring_comm_->allgather(send, recv, count, dtype));
}

Status Runtime::shutdown() {
  if (!initialized_) return {};
  gpu_.reset();
  ring_comm_.reset();
  client_.reset();
  listener_ = transport::Listener{};
  initialized_ = false;
  return {};
}

Status Runtime::barrier() {
  if (auto s = check_ready("hvd_barrier"); !s) return s;
  return after(ring_comm_->barrier());
}

void Runtime::report_fatal(const std::string& message) {
  if (client_) (void)client_->report_fatal(message);
}

}  // namespace hvdrun
