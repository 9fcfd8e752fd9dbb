#include "launcher/horovod_flags.h"

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "common/tunables.h"
#include "launcher/exit_status.h"

namespace hvdrun {
namespace {

// Horovod's tuning and library flags (horovodrun, horovod/runner/launch.py): each sets a
// worker variable, and is read from --config-file's SECTION.KEY when not on the command line.
struct HorovodFlag {
  const char* name;     // "--fusion-threshold-mb"
  enum Kind { kInt, kFloat, kString, kTrue, kFalse } kind;
  const char* env;      // the worker variable it sets; "" for none
  const char* section;  // --config-file: section and key ("" for none)
  const char* key;
  long long scale = 1;  // kInt: the value times this (MB -> bytes)
};

const std::vector<HorovodFlag>& horovod_flags() {
  using F = HorovodFlag;
  static const std::vector<HorovodFlag> flags = {
      {"--fusion-threshold-mb", F::kInt, "HOROVOD_FUSION_THRESHOLD", "params", "fusion_threshold_mb", 1 << 20},
      {"--cycle-time-ms", F::kFloat, "HOROVOD_CYCLE_TIME", "params", "cycle_time_ms"},
      {"--cache-capacity", F::kInt, "HOROVOD_CACHE_CAPACITY", "params", "cache_capacity"},
      {"--autotune", F::kTrue, "HOROVOD_AUTOTUNE", "autotune", "enabled"},
      {"--no-autotune", F::kFalse, "HOROVOD_AUTOTUNE", "", ""},
      {"--autotune-log-file", F::kString, "HOROVOD_AUTOTUNE_LOG", "autotune", "log_file"},
      {"--autotune-warmup-samples", F::kInt, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "autotune", "warmup_samples"},
      {"--autotune-steps-per-sample", F::kInt, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "autotune", "steps_per_sample"},
      {"--autotune-bayes-opt-max-samples", F::kInt, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "autotune",
       "bayes_opt_max_samples"},
      {"--autotune-gaussian-process-noise", F::kFloat, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "autotune",
       "gaussian_process_noise"},
      {"--no-stall-check", F::kTrue, "HOROVOD_STALL_CHECK_DISABLE", "", ""},
      {"--stall-check", F::kFalse, "HOROVOD_STALL_CHECK_DISABLE", "", ""},
      {"--stall-check-warning-time-seconds", F::kInt, "HOROVOD_STALL_CHECK_TIME_SECONDS", "stall_check",
       "warning_time_seconds"},
      {"--stall-check-shutdown-time-seconds", F::kInt, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "stall_check",
       "shutdown_time_seconds"},
      {"--mpi-threads-disable", F::kTrue, "HOROVOD_MPI_THREADS_DISABLE", "library_options", "mpi_threads_disable"},
      {"--no-mpi-threads-disable", F::kFalse, "HOROVOD_MPI_THREADS_DISABLE", "", ""},
      {"--num-nccl-streams", F::kInt, "HOROVOD_NUM_NCCL_STREAMS", "library_options", "num_nccl_streams"},
      {"--ccl-bgt-affinity", F::kInt, "HOROVOD_CCL_BGT_AFFINITY", "library_options", "ccl_bgt_affinity"},
      {"--thread-affinity", F::kInt, "HOROVOD_THREAD_AFFINITY", "", ""},
      {"--gloo-timeout-seconds", F::kInt, "HOROVOD_GLOO_TIMEOUT_SECONDS", "library_options", "gloo_timeout_seconds"},
      {"--log-with-timestamp", F::kFalse, "HOROVOD_LOG_HIDE_TIME", "", ""},
      {"--log-without-timestamp", F::kTrue, "HOROVOD_LOG_HIDE_TIME", "logging", "hide_timestamp"},
      {"--log-hide-timestamp", F::kTrue, "HOROVOD_LOG_HIDE_TIME", "", ""},
      {"--no-log-hide-timestamp", F::kFalse, "HOROVOD_LOG_HIDE_TIME", "", ""},
      {"--mpi-args", F::kString, "", "", ""},
      {"--binding-args", F::kString, "", "", ""},
  };
  return flags;
}

// libhvdrun reads this variable (by our name or as Horovod's alias).
bool runtime_reads(std::string_view env) {
  for (const auto& t : all_tunables())
    if (t.env == env || t.horovod == env) return true;
  return false;
}

}  // namespace

void add_horovod_flags(CLI::App& app, HorovodFlagValues& v) {
  for (const auto& f : horovod_flags()) {
    std::string env = *f.env ? std::string(f.env) : std::string("nothing");
    if (f.kind == HorovodFlag::kTrue || f.kind == HorovodFlag::kFalse)
      app.add_flag(f.name, v.set[f.name], std::string("Horovod: sets ") + env + "=" +
                                              (f.kind == HorovodFlag::kTrue ? "1" : "0") + " for the workers")
          ->group("Horovod tuning (horovodrun's flags)");
    else
      app.add_option(f.name, v.values[f.name],
                     std::string_view(f.name) == "--binding-args"
                         ? std::string("Horovod: mpirun's binding flags, acted on as --bind-to (--bind-to X, --map-by Y)")
                         : std::string("Horovod: sets ") + env + " for the workers")
          ->type_name(f.kind == HorovodFlag::kString ? "TEXT" : "N")
          ->group("Horovod tuning (horovodrun's flags)");
  }
}

namespace {

// One flag's value: from the command line, else from --config-file; nullopt when neither.
// A number is checked and scaled (MB -> bytes).
Result<std::optional<std::string>> flag_value(const CLI::App& app, const HorovodFlag& f, const HorovodFlagValues& v,
                                              const std::map<std::string, std::string>& from_config) {
  std::string value;
  bool is_bool = f.kind == HorovodFlag::kTrue || f.kind == HorovodFlag::kFalse;
  if (app.get_option(f.name)->count() > 0) {
    value = is_bool ? (f.kind == HorovodFlag::kTrue ? "1" : "0") : v.values.at(f.name);
  } else if (auto it = from_config.find(f.name); it != from_config.end()) {
    value = it->second;
    if (is_bool && f.kind == HorovodFlag::kFalse) value = value == "1" ? "0" : "1";
  } else {
    return std::optional<std::string>();
  }
  if (f.kind == HorovodFlag::kInt) {
    auto n = parse_int(value, f.name, 0, (1LL << 40) / f.scale);
    if (!n) return n.error();
    value = std::to_string(*n * f.scale);
  } else if (f.kind == HorovodFlag::kFloat) {
    if (auto d = parse_double(value, f.name, 0, 1e9); !d) return d.error();
  }
  return std::optional<std::string>(value);
}

}  // namespace

// Horovod's flags set the workers' variables; one warning names those the runtime does not
// act on yet.
Result<std::vector<std::string>> horovod_flag_env(const CLI::App& app, const HorovodFlagValues& v,
                                                  const std::map<std::string, std::string>& from_config,
                                                  std::vector<std::string>& warnings) {
  std::vector<std::string> env, not_acted;
  for (const auto& f : horovod_flags()) {
    auto value = flag_value(app, f, v, from_config);
    if (!value) return value.error();
    if (!*value) continue;
    if (*f.env) env.push_back(std::string(f.env) + "=" + **value);
    bool acted = *f.env ? runtime_reads(f.env) : std::string_view(f.name) == "--binding-args";  // as --bind-to
    if (!acted) not_acted.push_back(f.name);
  }
  if (!not_acted.empty()) {
    std::string list;
    for (const auto& n : not_acted) list += (list.empty() ? "" : ", ") + n;
    warnings.push_back(list + ": accepted, but hvdrun's runtime does not act on " +
                       (not_acted.size() == 1 ? "it" : "them") + " yet");
  }
  return env;
}

// Horovod's --config-file (horovod/runner/common/util/config_parser.py): sections of
// keys, each the same as a flag. Returns flag -> value ("1"/"0" for booleans).
Result<std::vector<std::pair<std::string, std::string>>> read_config_file(const std::string& path) {
  auto fail = [&](const std::string& why) {
    return error_of(ErrorKind::kUsage, "--config-file '" + printable(path) + "': " + why);
  };
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec) return fail(ec.message());
  if (!std::filesystem::is_regular_file(st)) return fail("not a regular file");
  if (std::filesystem::file_size(path, ec) > kMaxConfigBytes) return fail("larger than 1 MiB");
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return fail("cannot be read");
  return parse_config_text(text, "--config-file '" + printable(path) + "'");
}

namespace {

// One key of a config file's section: the flag it stands for and its value ("1" or "0"
// for a switch). `fail` makes the error.
template <class Fail>
Result<std::pair<std::string, std::string>> config_entry(const std::string& section, const std::string& key,
                                                         const YAML::Node& node, Fail fail) {
  const std::string name = section + "." + key;
  // Keys whose flags belong to other parts of hvdrun.
  static const std::map<std::string, std::pair<std::string, char>> kOther = {
      {"params.hierarchical_allreduce", {"--hierarchical-allreduce", 'b'}},
      {"params.hierarchical_allgather", {"--hierarchical-allgather", 'b'}},
      {"timeline.filename", {"--timeline-filename", 's'}},
      {"timeline.mark_cycles", {"--timeline-mark-cycles", 'b'}},
      {"stall_check.enabled", {"--stall-check", 'b'}},
      {"logging.level", {"--log-level", 's'}},
  };
  if (!node.IsScalar()) return fail("'" + name + "': expected a value");
  const HorovodFlag* flag = nullptr;
  for (const auto& f : horovod_flags())
    if (section == f.section && key == f.key) flag = &f;
  char type = 's';
  std::string flag_name;
  if (flag) {
    flag_name = flag->name;
    type = flag->kind == HorovodFlag::kTrue || flag->kind == HorovodFlag::kFalse ? 'b' : 's';
  } else if (auto it = kOther.find(name); it != kOther.end()) {
    flag_name = it->second.first;
    type = it->second.second;
  } else {
    return fail("unknown key '" + name + "'");
  }
  std::string value;
  if (type == 'b') {
    bool b;
    if (!YAML::convert<bool>::decode(node, b)) return fail("'" + name + "': expected true or false");
    value = b ? "1" : "0";
  } else {
    value = node.as<std::string>();
  }
  return std::make_pair(flag_name, value);
}

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> parse_config_text(std::string_view text,
                                                                           const std::string& what) {
  // yaml-cpp's messages quote the input's bytes at times: one printable line, always.
  auto fail = [&](const std::string& why) { return error_of(ErrorKind::kUsage, what + ": " + printable(why, 300, true)); };
  if (text.size() > kMaxConfigBytes) return fail("larger than 1 MiB");
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return fail(std::string("not YAML: ") + e.what());
  }
  std::vector<std::pair<std::string, std::string>> out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) return fail("expected sections (params, autotune, timeline, stall_check, library_options, logging)");
  try {
    for (const auto& sec : root) {
      std::string section = sec.first.as<std::string>();
      if (!sec.second.IsMap()) return fail("section '" + section + "': expected keys and values");
      for (const auto& kv : sec.second) {
        std::string key = kv.first.as<std::string>();
        auto entry = config_entry(section, key, kv.second, fail);
        if (!entry) return entry.error();
        out.push_back(std::move(*entry));
      }
    }
  } catch (const YAML::Exception& e) {
    return fail(e.what());
  }
  return out;
}

}  // namespace hvdrun
