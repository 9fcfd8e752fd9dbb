// hvdrun --horovod-compat: a `horovod` package (horovod.torch = hvdrun.torch) first on the
// workers' PYTHONPATH, so a script that does `import horovod.torch as hvd` runs on hvdrun
// with no real Horovod installed. Never shadows a real Horovod.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace hvdrun {

// Where the shim lies for an hvdrun executable at `self_exe`: <its dir>/../share/hvdrun/
// horovod-compat (cmake --install and pip install put it there; the build tree has a link).
std::string horovod_compat_dir_for(const std::string& self_exe);

// `dir` in front of a PYTHONPATH value (which may be empty).
std::string prepend_to_path(const std::string& dir, const std::string& path);

// The Python the probe runs: the command's own when it is a Python (python, python3.11,
// a venv's python), else python3 from the workers' PATH.
std::string probe_python(const std::vector<std::string>& command);

// Checks that the shim is installed at `dir` (an error naming the path when it is not).
Status check_horovod_compat_dir(const std::string& dir);

// Where `python` (resolved with the workers' environment `env`, "K=V" strings) would import
// a real horovod from, "" when it would import none (or only the shim at `shim_dir`). Errors
// when the probe cannot run or does not answer within `timeout_s`.
Result<std::string> real_horovod_location(const std::string& python, const std::vector<std::string>& env,
                                          const std::string& shim_dir, double timeout_s);

}  // namespace hvdrun
