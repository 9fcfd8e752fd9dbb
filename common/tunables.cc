#include "common/tunables.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "common/strings.h"

namespace hvdrun {
namespace {

constexpr Tunable kTable[] = {
    // Launcher side.
    {"HVDRUN_START_TIMEOUT", "30", TunableUse::kLauncher,
     "Seconds for every rank to reach the rendezvous (--start-timeout).", "",
     {0.001, 1e7, "seconds"}},
    {"HVDRUN_KILL_GRACE", "5", TunableUse::kLauncher,
     "Seconds between SIGTERM and SIGKILL when a job is torn down (--kill-grace).", "",
     {0, 1e7, "seconds"}},
    {"HVDRUN_LOG_LEVEL", "warn", TunableUse::kLauncher,
     "hvdrun's log level: trace, debug, info, warn, error, critical, off (--log-level)."},
    {"HVDRUN_HEARTBEAT_TIMEOUT", "30", TunableUse::kLauncher,
     "Seconds of silence after which hvdrun and a remote agent take each other for gone "
     "(heartbeats every 2 s; a network partition sends no FIN).", "",
     {3, 1e7, "seconds", " (longer than the 2 s between heartbeats)"}},
    {"HVDRUN_AGENT_CONNECT", "", TunableUse::kLauncher,
     "Set by hvdrun for the agents it starts with srun: 'PORT ADDR,...' to connect back to."},
    {"HVDRUN_AGENT_TOKEN", "", TunableUse::kLauncher,
     "Set by hvdrun for the agents it starts with srun: the one-job token they prove."},
    {"HVDRUN_AGENT_STACK", "", TunableUse::kLauncher,
     "Set by hvdrun for the agents it starts with srun: its network stack (loopback is tried only on the same)."},
    {"HVDRUN_HOROVOD", "0", TunableUse::kLauncher,
     "1: serve Horovod 0.28.1's Gloo rendezvous (an HTTP key-value store) and give the workers "
     "horovodrun --gloo's variables, so that programs using a real Horovod run unchanged (--horovod)."},
    {"HVDRUN_HOROVOD_STORE_KEYS", "1048576", TunableUse::kLauncher,
     "--horovod: keys Horovod's store holds at most, besides the room kept for the job's own rendezvous.", "",
     {1, 1e12, "keys"}},
    {"HVDRUN_HOROVOD_STORE_BYTES", "268435456", TunableUse::kLauncher,
     "--horovod: bytes Horovod's store holds at most (values stored, being received and being sent), "
     "besides the room kept for the job's own rendezvous.", "",
     {65536, 1e15, "bytes"}},
    {"HVDRUN_ELASTIC_TIMEOUT", "600", TunableUse::kLauncher,
     "Elastic: seconds to wait for --min-np slots after a reset before the job ends (--elastic-timeout).",
     "HOROVOD_ELASTIC_TIMEOUT", {0.001, 1e7, "seconds"}},
    {"HVDRUN_DISCOVERY_INTERVAL", "1", TunableUse::kLauncher,
     "Elastic: seconds between two runs of --host-discovery-script.", "", {0.001, 1e6, "seconds"}},
    {"HVDRUN_DISCOVERY_TIMEOUT", "30", TunableUse::kLauncher,
     "Elastic: seconds a run of --host-discovery-script may take; a script still running is killed and named.",
     "", {0.001, 1e6, "seconds"}},
    {"SLURMD_NODENAME", "", TunableUse::kLauncher,
     "Slurm's: the node an agent started by srun runs on (its name in the job's host list)."},
    {"SLURM_PROCID", "0", TunableUse::kLauncher, "Slurm's: the task id of an agent started by srun."},
    // Worker side (libhvdrun).
    {"CUDA_VISIBLE_DEVICES", "", TunableUse::kWorker,
     "CUDA's: the devices a rank may use (named in libhvdrun's errors when a device is missing)."},
    {"HVDRUN_TIMEOUT", "60", TunableUse::kWorker,
     "Seconds a collective waits on a silent peer before it fails naming that peer.", "",
     {0.001, 1e7, "seconds"}},
    {"HVDRUN_SPIN_US", "auto", TunableUse::kWorker,
     "Microseconds a rank polls its peers before it sleeps (futex or poll()); auto: 20000. The spin "
     "yields the core at each turn unless the rank is bound to one CPU and this host's ranks fit its cores.", "",
     {0, 1e7, "microseconds", " (or auto)", false, "20000"}},
    {"HVDRUN_SEGMENT_BYTES", "262144", TunableUse::kWorker,
     "Pipeline segment size of the ring collectives, in bytes (the reduce window).", "",
     {4096, 1 << 30, "bytes"}},
    // Below loopback's 64 KiB segments a receive window stalls TCP on its persist timer
    // (hundreds of milliseconds a message).
    {"HVDRUN_SOCKET_BUFFER", "524288", TunableUse::kWorker,
     "SO_SNDBUF/SO_RCVBUF of data-plane sockets, in bytes (at least 65536, or 0 for the kernel's default); "
     "small enough that data in flight stays in cache.", "",
     {65536, 1 << 30, "bytes", " (or 0: the kernel's default)", true}},
    {"HVDRUN_SHM", "1", TunableUse::kWorker,
     "1: ranks of one host exchange data through shared-memory rings (memfd, no file in /dev/shm); "
     "0: over loopback TCP."},
    {"HVDRUN_SHM_RING_BYTES", "1048576", TunableUse::kWorker,
     "Capacity of each shared-memory ring (one per direction between neighbours on one host), in bytes.", "",
     {4096, 1 << 30, "bytes"}},
    {"HVDRUN_SHM_SINGLE_COPY_BYTES", "262144", TunableUse::kWorker,
     "Messages between ranks of one host of at least this many bytes are copied once, straight out of the "
     "sender's memory (process_vm_readv, as Open MPI's CMA), instead of through the ring; 0: never. "
     "Used only where the kernel lets a rank read its peer's memory.", "",
     {4096, 1ull << 40, "bytes", " (or 0: never)", true}},
    {"HVDRUN_SHM_ALLREDUCE_BYTES", "auto", TunableUse::kWorker,
     "In a job whose ranks all share one host, allreduces of at most this many bytes go through one "
     "shared segment of the host (every rank adds its share of every rank's data: two barriers, not "
     "2(n-1) ring steps); larger ones through the ring. 0: never. auto: every size with 3 or more ranks, "
     "never with 2 (their ring is one hop each way).", "",
     {0, 1ull << 50, "bytes", " (or auto)"}},
    {"HVDRUN_HIERARCHICAL_ALLREDUCE", "", TunableUse::kWorker,
     "auto, 1 or 0: allreduce as reduce-scatter within each host (shared memory), allreduce of each "
     "shard between hosts, allgather within the host (hvdrun --hierarchical-allreduce); "
     "unset: HOROVOD_HIERARCHICAL_ALLREDUCE, else auto (on with several hosts and several ranks on each)."},
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "", TunableUse::kWorker,
     "Horovod's name of HVDRUN_HIERARCHICAL_ALLREDUCE (which wins when both are set)."},
    {"HVDRUN_HIERARCHICAL_ALLGATHER", "", TunableUse::kWorker,
     "auto, 1 or 0: allgather between hosts, then within each host (hvdrun --hierarchical-allgather); "
     "unset: HOROVOD_HIERARCHICAL_ALLGATHER, else auto."},
    {"HOROVOD_HIERARCHICAL_ALLGATHER", "", TunableUse::kWorker,
     "Horovod's name of HVDRUN_HIERARCHICAL_ALLGATHER (which wins when both are set)."},
    {"HVDRUN_CUDA_DEVICE", "", TunableUse::kWorker,
     "CUDA device of this rank, an index within CUDA_VISIBLE_DEVICES; empty: the local rank."},
    {"HVDRUN_NCCL_EAGER", "0", TunableUse::kWorker,
     "1: create the NCCL communicator in hvd_init instead of at the first device collective."},
    {"HVDRUN_NCCL_LIBRARY", "", TunableUse::kWorker,
     "Path of the libnccl.so.2 to load when the process has none loaded yet (PyTorch's, when it was imported "
     "first, is always used); empty: libnccl.so.2 from the library path, else the NCCL hvdrun was built against."},
    // The collective engine (libhvdrun); Horovod's names work too.
    {"HVDRUN_FUSION_THRESHOLD", "134217728", TunableUse::kWorker,
     "Bytes of the fusion buffer: consecutive ready allreduces of one dtype and reduction are "
     "copied into it and reduced in one transfer; 0 disables fusion.",
     "HOROVOD_FUSION_THRESHOLD", {0, 1ull << 40, "bytes"}},
    {"HVDRUN_CYCLE_TIME", "1", TunableUse::kWorker,
     "Milliseconds: after a negotiation cycle that found nothing ready, new requests wait this long "
     "for more to batch with them (a request on an idle engine starts at once).",
     "HOROVOD_CYCLE_TIME", {0, 1e6, "milliseconds"}},
    {"HVDRUN_THREAD_AFFINITY", "", TunableUse::kWorker,
     "CPU ids, one per local rank ('0,4,8,12'; one id: every rank's), for the engine's background "
     "thread to be bound to (Horovod's --thread-affinity); unset: it runs where the rank is bound.",
     "HOROVOD_THREAD_AFFINITY"},
    {"HVDRUN_CACHE_CAPACITY", "1024", TunableUse::kWorker,
     "Agreed responses the engine caches, so that a repeated name costs one bit of negotiation; 0 disables.",
     "HOROVOD_CACHE_CAPACITY", {0, 1e7, "entries"}},
    {"HVDRUN_DYNAMIC_PROCESS_SETS", "0", TunableUse::kWorker,
     "1: process sets may be added and removed after hvd_init (hvd_add_process_set, "
     "hvd.add_process_set); 0: only hvd_init's (hvd.init(process_sets=...)).",
     "HOROVOD_DYNAMIC_PROCESS_SETS"},
    {"HVDRUN_STALL_CHECK_TIME_SECONDS", "60", TunableUse::kWorker,
     "Seconds after which hvdrun warns (once) about names some ranks submitted and others did not, "
     "naming the ranks and hosts missing; 0 disables.",
     "HOROVOD_STALL_CHECK_TIME_SECONDS", {0, 1e7, "seconds"}},
    {"HVDRUN_STALL_SHUTDOWN_TIME_SECONDS", "0", TunableUse::kWorker,
     "Seconds after which such a stall ends the job, with the same list; 0: never.",
     "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", {0, 1e7, "seconds"}},
    {"HVDRUN_TIMELINE", "", TunableUse::kWorker,
     "File for a Chrome trace of the job's collectives: each rank writes FILE.rank<N>, and hvdrun "
     "merges them into FILE at the end (--timeline-filename).",
     "HOROVOD_TIMELINE"},
    {"HVDRUN_TIMELINE_MARK_CYCLES", "0", TunableUse::kWorker,
     "1: mark each negotiation cycle in the timeline (--timeline-mark-cycles).",
     "HOROVOD_TIMELINE_MARK_CYCLES"},
    {"HVDRUN_LIBRARY", "", TunableUse::kWorker,
     "Python package hvdrun (hvdrun.torch, hvdrun.numpy): path of the libhvdrun.so to load; "
     "empty: the one installed with the package."},
    {"HOROVOD_ELASTIC", "", TunableUse::kWorker,
     "Horovod's: 1 (set by horovodrun's elastic mode): hvdrun.torch's DistributedOptimizer registers "
     "its gradient hooks even in a job of one rank."},
    {"HVDRUN_ELASTIC", "0", TunableUse::kWorker,
     "1 (set by hvdrun in an elastic job, beside Horovod's HOROVOD_ELASTIC=1): hvd_elastic() says so."},
    // The contract hvdrun sets for each worker.
    {"HVDRUN_RENDEZVOUS_ADDR", "", TunableUse::kContract, "Address of hvdrun's rendezvous server."},
    {"HVDRUN_RENDEZVOUS_PORT", "", TunableUse::kContract, "Port of hvdrun's rendezvous server."},
    {"HVDRUN_SECRET", "", TunableUse::kContract, "The job's 256-bit secret, hex; never logged."},
    {"HVDRUN_IFACE", "", TunableUse::kContract, "Network interface for the data plane (--network-interface)."},
    {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "", TunableUse::kContract,
     "--horovod: address of the Horovod Gloo store hvdrun serves (as horovodrun --gloo)."},
    {"HOROVOD_GLOO_RENDEZVOUS_PORT", "", TunableUse::kContract, "--horovod: port of that store."},
    {"HOROVOD_CONTROLLER", "", TunableUse::kContract, "--horovod: gloo (Horovod's controller)."},
    {"HOROVOD_CPU_OPERATIONS", "", TunableUse::kContract, "--horovod: gloo (Horovod's CPU collectives)."},
    {"HOROVOD_GLOO_IFACE", "", TunableUse::kContract,
     "--horovod: the interface Horovod's Gloo uses on this host (that of the address hvdrun chose; lo for a local job)."},
    {"HVDRUN_ELASTIC_ROUND", "", TunableUse::kContract,
     "Elastic: the round the worker was spawned into (1: the job's first); its slot's numbers are in the store."},
    {"HVDRUN_ELASTIC_SLOT", "", TunableUse::kContract,
     "Elastic: the worker's slot, host:index (index 0 to slots-1 on that host), for the worker's whole life."},
    {"HVDRUN_RESTART_COUNT", "", TunableUse::kContract,
     "--max-restarts: how many times the job's workers were restarted (0 the first time)."},
    {"TORCHELASTIC_RESTART_COUNT", "", TunableUse::kContract, "--max-restarts: torchrun's name of the same."},
    {"TORCHELASTIC_MAX_RESTARTS", "", TunableUse::kContract, "--max-restarts: its N (as torchrun sets it)."},
    {"HOROVOD_RANK", "", TunableUse::kContract, "Global rank."},
    {"HOROVOD_SIZE", "", TunableUse::kContract, "Number of ranks."},
    {"HOROVOD_LOCAL_RANK", "", TunableUse::kContract, "Rank on this host."},
    {"HOROVOD_LOCAL_SIZE", "", TunableUse::kContract, "Ranks on this host."},
    {"HOROVOD_CROSS_RANK", "", TunableUse::kContract, "Index of this host among hosts with this local rank."},
    {"HOROVOD_CROSS_SIZE", "", TunableUse::kContract, "Hosts with a process at this local rank."},
    {"HOROVOD_HOSTNAME", "", TunableUse::kContract, "The host as written in -H or the host file."},
    {"RANK", "", TunableUse::kContract, "torch.distributed: global rank."},
    {"WORLD_SIZE", "", TunableUse::kContract, "torch.distributed: number of ranks."},
    {"LOCAL_RANK", "", TunableUse::kContract, "torch.distributed: rank on this host."},
    {"LOCAL_WORLD_SIZE", "", TunableUse::kContract, "torch.distributed: ranks on this host."},
    {"GROUP_RANK", "", TunableUse::kContract, "torch.distributed: index of this host (cross rank of local rank 0)."},
    {"MASTER_ADDR", "", TunableUse::kContract, "torch.distributed: address of rank 0's host."},
    {"MASTER_PORT", "", TunableUse::kContract, "torch.distributed: a port free on rank 0's host."},
    {"NCCL_SOCKET_IFNAME", "", TunableUse::kContract, "NCCL's interface: set from --network-interface."},
    {"GLOO_SOCKET_IFNAME", "", TunableUse::kContract, "Gloo's interface: set from --network-interface."},
    {"NCCL_DEBUG", "", TunableUse::kContract, "NCCL's log level: set from --nccl-debug."},
    {"PYTHONUNBUFFERED", "1", TunableUse::kContract, "Set so Python workers' output is not held back."},
};

}  // namespace

Status check_tunables(TunableUse use) {
  for (const auto& t : kTable) {
    const TunableRange& r = t.range;
    if (r.unit.empty() || t.use != use) continue;
    std::string name(t.env);
    const char* v = std::getenv(name.c_str());
    if (!v && !t.horovod.empty()) {
      name = std::string(t.horovod);
      v = std::getenv(name.c_str());
    }
    if (!v) continue;
    if (r.zero_too && parse_double(v, name, 0, 0)) continue;
    if (t.default_value == "auto" && std::string_view(v) == "auto") continue;
    if (auto d = parse_double(v, name, r.min, r.max); !d)
      return make_error(ErrorKind::kUsage, d.error().message + " (" + std::string(r.unit) + ")" + std::string(r.note));
  }
  return {};
}

std::span<const Tunable> all_tunables() { return kTable; }

const Tunable* find_tunable(std::string_view env) {
  for (const auto& t : kTable)
    if (t.env == env || (!t.horovod.empty() && t.horovod == env)) return &t;
  return nullptr;
}

std::optional<std::string> tunable_if_set(std::string_view env) {
  const Tunable* t = find_tunable(env);
  if (!t) throw std::logic_error("unknown tunable " + std::string(env));
  const char* v = std::getenv(std::string(env).c_str());
  if (!v && !t->horovod.empty()) v = std::getenv(std::string(t->horovod).c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string tunable_string(std::string_view env) {
  auto v = tunable_if_set(env);
  return v ? *v : std::string(find_tunable(env)->default_value);
}

namespace {

// A value of `t` as a number: "auto" as the range's auto_means.
Result<double> as_number(const Tunable& t, std::string_view v) {
  if (v == "auto" && !t.range.auto_means.empty()) v = t.range.auto_means;
  return parse_double(v, t.env, 0, 1e12);
}

}  // namespace

double tunable_default(std::string_view env) {
  const Tunable* t = find_tunable(env);
  if (!t) throw std::logic_error("unknown tunable " + std::string(env));
  auto d = as_number(*t, t->default_value);
  if (!d) throw std::logic_error("tunable " + std::string(env) + " has no numeric default");
  return *d;
}

double tunable_double(std::string_view env) {
  std::string v = tunable_string(env);
  const Tunable& t = *find_tunable(env);
  auto r = as_number(t, v);
  if (r) return *r;
  std::fprintf(stderr, "hvdrun: %s; using the default %s\n", r.error().message.c_str(),
               std::string(t.default_value).c_str());
  return tunable_default(env);
}

long long tunable_int(std::string_view env) { return static_cast<long long>(tunable_double(env)); }

bool tunable_is_auto(std::string_view env) { return tunable_string(env) == "auto"; }

}  // namespace hvdrun
