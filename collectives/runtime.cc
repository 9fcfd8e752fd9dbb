#include "collectives/runtime.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "collectives/buffer_checks.h"
#include "collectives/dtype.h"
#include "collectives/hierarchy.h"
#include "collectives/rendezvous_store.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include "common/log.h"

#include "common/deadline.h"
#include "common/net.h"
#include "common/strings.h"
#include "common/tunables.h"
#include "hvdrun/hvdrun.h"
#include "rendezvous/auth.h"

namespace hvdrun {
namespace {

// `e` as this rank's error of `kind` ("rank 3: <its message>"), its context kept.
Error as_rank(ErrorKind kind, int rank, const Error& e) {
  return with_kind(wrap(e, "rank " + std::to_string(rank)), kind);
}

}  // namespace

namespace {
Runtime* g_runtime = nullptr;  // for the fork handlers
}  // namespace

Runtime& Runtime::instance() {
  static Runtime* rt = [] {
    g_runtime = new Runtime();  // never destroyed: safe from exit-time ordering
    pthread_atfork(&Runtime::before_fork, &Runtime::after_fork_in_parent, &Runtime::after_fork_in_child);
    return g_runtime;
  }();
  return *rt;
}

// A query in a forked child (a DataLoader worker's hvd.rank()) takes the rank view's lock:
// no other thread of the parent may hold the child's copy of it.
void Runtime::before_fork() { g_runtime->view_mu_.lock(); }
void Runtime::after_fork_in_parent() { g_runtime->view_mu_.unlock(); }
void Runtime::after_fork_in_child() {
  g_runtime->view_mu_.unlock();
  if (g_runtime->owner_pid_.load() != 0) g_runtime->forked_ = true;
  if (g_runtime->timeline_) g_runtime->timeline_->drop_buffered_in_child();
}

Result<RankView> rank_view_from_env(const std::function<std::optional<std::string>(const char*)>& get) {
  RankView v;
  struct Field {
    const char* name;
    int* out;
  } fields[] = {{"HOROVOD_RANK", &v.rank},          {"HOROVOD_SIZE", &v.size},
                {"HOROVOD_LOCAL_RANK", &v.local_rank}, {"HOROVOD_LOCAL_SIZE", &v.local_size},
                {"HOROVOD_CROSS_RANK", &v.cross_rank}, {"HOROVOD_CROSS_SIZE", &v.cross_size}};
  for (auto& f : fields) {
    auto s = get(f.name);
    if (!s) return make_error(ErrorKind::kRendezvous,
                              std::string(f.name) + " is not set (start the program with hvdrun)");
    auto n = parse_int(*s, f.name, 0, 1 << 24);
    if (!n) return with_kind(n.error(), ErrorKind::kInvalidArgument);
    *f.out = static_cast<int>(*n);
  }
  if (v.size < 1 || v.rank >= v.size || v.local_rank >= v.local_size || v.cross_rank >= v.cross_size)
    return make_error(ErrorKind::kInvalidArgument,
                      "inconsistent HOROVOD_* rank variables (rank " + std::to_string(v.rank) +
                          " of " + std::to_string(v.size) + ")");
  v.host = get("HOROVOD_HOSTNAME").value_or("localhost");
  return v;
}

Status Runtime::init() {
  if (initialized_) return {};
  if (auto s = check_tunables(TunableUse::kWorker); !s) return with_kind(s.error(), ErrorKind::kInvalidArgument);
  auto addr = tunable_if_set("HVDRUN_RENDEZVOUS_ADDR");
  if (!addr) return init_alone();
  round_ended_ = false;
  round_end_.reset();
  if (tunable_string("HVDRUN_ELASTIC") == "1") return init_elastic(*addr);
  auto view = rank_view_from_env([](const char* n) { return tunable_if_set(n); });
  if (!view) return view.error();
  if (auto s = register_rank(*addr, *view); !s) return s;
  return bring_up();
}

// Not started by hvdrun: a job of one, as Horovod does.
Status Runtime::init_alone() {
  {
    std::lock_guard<std::mutex> lk(view_mu_);
    view_ = RankView{};
  }
  if (auto s = connect_ring(); !s) return s;
  if (auto s = start_engine(); !s) return s;
  owner_pid_ = getpid();
  initialized_ = true;
  ++inits_;
  return {};
}

// The data plane listens on the interface hvdrun chose, else on the address the
// rendezvous connection leaves from (which the other hosts can route to).
Result<transport::Listener> Runtime::listen_data_plane(const rdv::Client& client, int rank) {
  std::string iface = tunable_string("HVDRUN_IFACE");
  std::string advertise = client.local_address();
  if (!iface.empty()) {
    auto a = interface_address(iface);
    if (!a) return as_rank(ErrorKind::kInvalidArgument, rank, a.error());
    advertise = *a;
  }
  auto listener = transport::listen_tcp(iface.empty() ? "" : advertise, advertise);
  if (!listener) return as_rank(ErrorKind::kInternal, rank, listener.error());
  return listener;
}

// Connects and authenticates to hvdrun's rendezvous; *secret: the job's. `who` names this
// worker in errors ("rank 3").
Result<rdv::Client> Runtime::connect_rendezvous(const std::string& addr, const std::string& who,
                                                std::string* secret) {
  auto port = parse_int(tunable_string("HVDRUN_RENDEZVOUS_PORT"), "HVDRUN_RENDEZVOUS_PORT", 1, 65535);
  if (!port) return with_kind(port.error(), ErrorKind::kRendezvous);
  auto s = rdv::secret_from_hex(tunable_string("HVDRUN_SECRET"));
  if (!s) return with_kind(s.error(), ErrorKind::kAuth);
  *secret = *s;
  double start_timeout = tunable_double("HVDRUN_START_TIMEOUT");
  auto client = rdv::Client::connect(addr, static_cast<int>(*port), *s, deadline_in(start_timeout));
  if (!client) {
    const ErrorKind kind = client.error().kind == ErrorKind::kAuth ? ErrorKind::kAuth : ErrorKind::kRendezvous;
    return with_kind(wrap(client.error(), who), kind);
  }
  return client;
}

// Connects to hvdrun's rendezvous, registers this rank's data-plane address and takes its
// ring neighbours: the state a job's rank keeps until hvd_shutdown.
Status Runtime::register_rank(const std::string& addr, const RankView& view) {
  std::string secret;
  auto client = connect_rendezvous(addr, "rank " + std::to_string(view.rank), &secret);
  if (!client) return client.error();
  auto listener = listen_data_plane(*client, view.rank);
  if (!listener) return listener.error();
  // hvdrun owns the start time-out and names the missing ranks when it passes (its clock
  // may restart at the first registration): wait longer than it, so that its message wins.
  rdv::RegisterRequest req{view.rank, view.size, view.host, listener->addr, listener->port};
  auto reg = client->register_rank(req, deadline_in(2 * tunable_double("HVDRUN_START_TIMEOUT") + 10));
  if (!reg) {
    const ErrorKind kind = reg.error().kind == ErrorKind::kTimeout ? ErrorKind::kTimeout : ErrorKind::kRendezvous;
    return as_rank(kind, view.rank, reg.error());
  }
  adopt(view, std::move(secret), std::move(*client), std::move(*listener), *reg);
  return {};
}

void Runtime::adopt(const RankView& view, std::string secret, rdv::Client client, transport::Listener listener,
                    const rdv::Registered& reg) {
  {
    std::lock_guard<std::mutex> lk(view_mu_);
    view_ = view;
  }
  secret_ = std::move(secret);
  client_.emplace(std::move(client));
  peer_hosts_.clear();  // another job's, after hvd_shutdown
  listener_ = std::move(listener);
  ring_ = reg;
}

// Once registered: the ring, the device (with HVDRUN_NCCL_EAGER), the engine.
Status Runtime::bring_up() {
  if (auto s = connect_ring(); !s) {
    client_.reset();
    return s;
  }
  if (tunable_string("HVDRUN_NCCL_EAGER") == "1") {
    // The device's set-up names no rank: here this rank's error, as the engine's
    // fail_all makes it on the first device call.
    if (auto s = ensure_gpu(); !s) {
      drop_ring();
      client_.reset();
      return as_rank(s.error().kind, view_.rank, s.error());
    }
  }
  if (auto s = start_engine(); !s) {
    gpu_.reset();
    drop_ring();
    client_.reset();
    return s;
  }
  owner_pid_ = getpid();
  initialized_ = true;
  ++inits_;
  spdlog::debug("rank {}: registered; left {} at {}:{}, right {} at {}:{}", view_.rank, ring_.left.rank,
                ring_.left.addr, ring_.left.port, ring_.right.rank, ring_.right.addr, ring_.right.port);
  return {};
}

// A rank spins without yielding only when it has a core of its own: bound to one CPU (by
// mpirun-style binding, taskset, a batch system) and this host's ranks fit its cores.
// Otherwise the spin yields at each turn, so that it never keeps the peer it waits for off
// the CPU (as Open MPI's progress loop does when oversubscribed).
bool spin_yields(int local_ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return true;
  return !(CPU_COUNT(&set) == 1 && local_ranks <= static_cast<int>(std::thread::hardware_concurrency()));
}

// HVDRUN_SHM_ALLREDUCE_BYTES; "auto": no limit from 3 ranks on, never with 2 (their ring is
// one hop each way: the segment's copy in, reduce and copy out only add work).
size_t shm_allreduce_bytes(int ranks) {
  if (tunable_is_auto("HVDRUN_SHM_ALLREDUCE_BYTES")) return ranks >= 3 ? SIZE_MAX : 0;
  return static_cast<size_t>(tunable_int("HVDRUN_SHM_ALLREDUCE_BYTES"));
}

RingOptions Runtime::ring_options() const {
  RingOptions ro;
  ro.timeout_s = tunable_double("HVDRUN_TIMEOUT");
  ro.spin_us = static_cast<int>(tunable_int("HVDRUN_SPIN_US"));  // past it a rank sleeps (futex, poll())
  ro.spin_yields = spin_yields(view_.local_size);
  ro.segment_bytes = static_cast<size_t>(std::max<long long>(4096, tunable_int("HVDRUN_SEGMENT_BYTES")));
  return ro;
}

Status Runtime::connect_ring() {
  const RingOptions ro = ring_options();
  if (view_.size == 1) {
    publish_ring(std::make_unique<Ring>(0, 1, transport::Pair{}, transport::Pair{}, ro));
    return {};
  }
  transport::PairOptions po = pair_options(ro.timeout_s);
  // Connect to the right while accepting from the left: every rank does both at once.
  Result<transport::Pair> right = make_error(ErrorKind::kInternal, "not connected");
  std::thread connector([&] { right = transport::connect_pair(peer_address(ring_.right), po); });
  auto left = transport::accept_pair(listener_.fd.get(), peer_address(ring_.left), po);
  connector.join();
  if (!right) return as_rank(ErrorKind::kPeerLost, view_.rank, right.error());
  if (!left) return as_rank(ErrorKind::kPeerLost, view_.rank, left.error());
  std::string to = !right->is_shm() ? "TCP" : right->shm()->single_copy() ? "shared memory (single copy)" : "shared memory";
  spdlog::debug("rank {}: to rank {} over {}, from rank {} over {}", view_.rank, ring_.right.rank, to, ring_.left.rank,
                left->is_shm() ? "shared memory" : "TCP");
  publish_ring(std::make_unique<Ring>(view_.rank, view_.size, std::move(*right), std::move(*left), ro));
  report_ring_failures();
  if (view_.local_size == view_.size && po.shm_accept) {
    if (auto s = attach_host_segment(); !s) return s;
  }
  auto wanted = hierarchy_from_tunables();
  if (!wanted) return as_rank(ErrorKind::kInvalidArgument, view_.rank, wanted.error());
  // Several hosts (every rank of such a job sees local_size < size): look at the layout.
  if (wanted->any() && view_.local_size < view_.size && client_) {
    RendezvousStore store(&*client_);
    HierarchySetup hs{&store, listener_.fd.get(), view_.rank, view_.size, po, ro, ro.timeout_s, generation()};
    if (auto s = attach_hierarchy(*ring_comm_, hs, *wanted); !s) return s;
  }
  return {};
}

transport::PairOptions Runtime::pair_options(double timeout_s) const {
  transport::PairOptions po;
  po.secret = secret_;
  po.self_rank = view_.rank;
  po.buffer_bytes = static_cast<int>(tunable_int("HVDRUN_SOCKET_BUFFER"));
  po.self_host = view_.host;
  po.shm_accept = tunable_string("HVDRUN_SHM") != "0";
  po.shm_ring_bytes = po.shm_accept ? static_cast<size_t>(std::max<long long>(4096, tunable_int("HVDRUN_SHM_RING_BYTES"))) : 0;
  po.shm_single_copy_bytes = static_cast<size_t>(tunable_int("HVDRUN_SHM_SINGLE_COPY_BYTES"));
  po.deadline = deadline_in(timeout_s);
  return po;
}

// What the ring tells hvdrun when it fails: the fatal error, the neighbour it waited on,
// the peer whose connection closed.
void Runtime::report_ring_failures() {
  ring_comm_->on_fatal = [this](const Error& e) {
    if (round_ended_) return;  // (elastic: the watcher broke the ring; nothing to blame)
    // A time-out names the neighbour it waited on, which may itself be waiting: hvdrun
    // weighs every rank's report to name the one that stalled the ring.
    if (e.peer_rank >= 0) {
      std::lock_guard<std::mutex> lk(client_mu_);
      if (client_) (void)client_->set(rdv::kSilentKeyPrefix + std::to_string(view_.rank), std::to_string(e.peer_rank));
    }
    report_fatal(e.message);
  };
  ring_comm_->on_peer_lost = [this](int peer) {
    if (round_ended_) return;
    std::lock_guard<std::mutex> lk(client_mu_);
    if (client_) (void)client_->set(rdv::kLostKeyPrefix + std::to_string(view_.rank), std::to_string(peer), 5);
  };
}

// Every rank on this host: allreduces through the host's shared segment (shm_allreduce.cc).
Status Runtime::attach_host_segment() {
  size_t max_bytes = shm_allreduce_bytes(view_.size);
  std::string why;
  auto attached = max_bytes ? ring_comm_->attach_group(view_.host, max_bytes, &why) : Result<bool>(false);
  if (!attached) return as_rank(ErrorKind::kPeerLost, view_.rank, attached.error());
  if (*attached)
    spdlog::debug("rank {}: allreduces of at most {} bytes through this host's shared segment", view_.rank, max_bytes);
  else if (max_bytes)
    spdlog::debug("rank {}: no shared segment for allreduces ({}): the ring carries them", view_.rank, why);
  return {};
}

Result<GpuCollectives*> Runtime::ensure_gpu() {
  return gpu_.get([this] { return make_gpu(); });
}

Result<std::unique_ptr<GpuCollectives>> Runtime::make_gpu() {
  GpuSetup g;
  g.rank = view_.rank;
  g.size = view_.size;
  g.local_rank = view_.local_rank;
  std::optional<RendezvousStore> store;
  if (client_) store.emplace(&*client_);
  g.store = store ? &*store : nullptr;
  g.ring = ring_comm_.get();
  g.timeout_s = tunable_double("HVDRUN_TIMEOUT");
  g.generation = gpu_generation_++;
  g.on_fatal = [this](const std::string& m) { report_fatal(m); };
  return make_gpu_collectives(g);
}

RankView Runtime::view() const {
  std::lock_guard<std::mutex> lk(view_mu_);
  return view_;
}

Status Runtime::start_engine() {
  EngineOptions o = engine_options();
  std::string tl = tunable_string("HVDRUN_TIMELINE");
  if (tl == "DYNAMIC") tl.clear();  // Horovod's "started later by hvd.start_timeline": no file at init
  // The file is created once per process: hvd_init after hvd_shutdown goes on writing it
  // (its path exists by then, and Timeline::open never overwrites).
  if (!tl.empty() && (!timeline_ || timeline_->path() != Timeline::rank_path(tl, view_.rank))) {
    auto t = Timeline::open(tl, view_.rank, view_.host, tunable_string("HVDRUN_TIMELINE_MARK_CYCLES") == "1");
    if (!t) return t.error();
    timeline_ = std::move(*t);
  }
  if (!tl.empty()) o.timeline = timeline_.get();
  publish_engine(std::make_shared<Engine>(ring_comm_.get(), std::move(o)));
  return {};
}

// The job's engine options; a process set's engine changes rank, size, host_of and gpu.
EngineOptions Runtime::engine_options() {
  EngineOptions o;
  o.rank = view_.rank;
  o.size = view_.size;
  o.thread_cpu = thread_cpu_of(tunable_string("HVDRUN_THREAD_AFFINITY"), view_.local_rank, view_.local_size);
  o.cycle_ms = tunable_double("HVDRUN_CYCLE_TIME");
  o.fusion_bytes = static_cast<size_t>(tunable_int("HVDRUN_FUSION_THRESHOLD"));
  o.cache_capacity = static_cast<size_t>(tunable_int("HVDRUN_CACHE_CAPACITY"));
  o.stall_check_s = tunable_double("HVDRUN_STALL_CHECK_TIME_SECONDS");
  o.stall_shutdown_s = tunable_double("HVDRUN_STALL_SHUTDOWN_TIME_SECONDS");
  o.gpu = [this] { return ensure_gpu(); };
  o.on_stall = [this, check_s = o.stall_check_s](const std::string& report, bool fatal) {
    std::lock_guard<std::mutex> lk(client_mu_);
    if (!client_) {
      std::fprintf(stderr, "hvdrun: stalled collectives:\n%s", report.c_str());
      return;
    }
    if (!fatal) {
      // The time is this rank's (hvdrun -x may have set it for the workers alone): hvdrun
      // prints the warning as it comes.
      char head[256];
      std::snprintf(head, sizeof head,
                    "collectives stalled for more than %g s (HVDRUN_STALL_CHECK_TIME_SECONDS): some ranks submitted "
                    "these names and others did not (different names, or different numbers of steps, deadlock the "
                    "job):\n",
                    check_s);
      (void)client_->set(rdv::kStallWarningKey, head + report);
      return;
    }
    (void)client_->set(rdv::kStallShutdownKey, report);
    if (fatal) (void)client_->report_fatal("stalled collectives past HVDRUN_STALL_SHUTDOWN_TIME_SECONDS:\n" + report);
  };
  o.on_fatal = [this](const std::string& m) { report_fatal(m); };
  o.host_of = [this](int rank) { return peer_host(rank); };
  return o;
}

Result<std::shared_ptr<Engine>> Runtime::engine(const char* what) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!initialized_ || !engine_) return make_error(ErrorKind::kNotInitialized,
                                                   std::string(what) + ": call hvd_init() first");
  return engine_;
}

Status Runtime::shutdown() {
  if (!initialized_) return {};
  watcher_.reset();  // (its numbers stay, for the next hvd_init)
  stop_sets();
  std::shared_ptr<Engine> e = engine_;
  if (e) e->stop("hvd_shutdown was called with this operation pending");
  engine_.reset();  // (the timeline stays open for an hvd_init to come)
  // Tell hvdrun this rank is done on purpose: a rank whose connection ends without it
  // left the job early, and is the one blamed when the others then fail.
  {
    std::lock_guard<std::mutex> lk(client_mu_);
    if (client_) (void)client_->set(rdv::kFinalizedKeyPrefix + std::to_string(view_.rank), "1");
  }
  gpu_.reset();
  ring_comm_.reset();
  {
    std::lock_guard<std::mutex> lk(client_mu_);
    client_.reset();
  }
  listener_ = transport::Listener{};
  initialized_ = false;
  return {};
}

void Runtime::report_fatal(const std::string& message) {
  std::lock_guard<std::mutex> lk(client_mu_);
  if (client_) (void)client_->report_fatal(message);
}

std::string Runtime::peer_host(int rank) {
  std::lock_guard<std::mutex> lk(client_mu_);
  if (auto it = peer_hosts_.find(rank); it != peer_hosts_.end()) return it->second;
  if (!client_) return "";
  auto p = client_->get_peer(rank, deadline_in(5));
  if (!p) return "";  // not kept: the next report asks again
  return peer_hosts_[rank] = p->host;
}

}  // namespace hvdrun
