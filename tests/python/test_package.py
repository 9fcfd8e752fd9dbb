"""The package itself: version, which libhvdrun it loads, and errors before init."""
from __future__ import annotations

import os
import re

import pytest

from conftest import REPO, run_python


def test_version_is_the_projects() -> None:
    import hvdrun
    m = re.search(r"project\(hvdrun VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text())
    assert m and hvdrun.__version__ == m.group(1)
    from hvdrun import _capi
    if _capi.has("hvd_version"):
        assert _capi.version() == hvdrun.__version__


def test_loads_the_expected_libhvdrun() -> None:
    """The test script says which installation this run tests (HVDRUN_EXPECT_LIBRARY_UNDER)."""
    from hvdrun import _capi
    where = os.environ.get("HVDRUN_EXPECT_LIBRARY_UNDER")
    if not where:
        pytest.skip("HVDRUN_EXPECT_LIBRARY_UNDER not set")
    assert os.path.realpath(_capi.library_path).startswith(os.path.realpath(where) + os.sep), _capi.library_path


def test_bad_hvdrun_library_is_one_clear_import_error() -> None:
    p = run_python("import hvdrun.numpy", env={"HVDRUN_LIBRARY": "/nonexistent/libhvdrun.so"})
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: hvdrun: HVDRUN_LIBRARY='/nonexistent/libhvdrun.so' cannot be loaded"), p.stderr


def test_calls_before_init_raise_not_initialized() -> None:
    code = """
import numpy as np
import hvdrun.numpy as hvd
from hvdrun import HorovodInternalError, NotInitializedError
for f in (hvd.rank, hvd.size, hvd.local_rank, hvd.local_size, hvd.cross_rank, hvd.cross_size, hvd.barrier,
          lambda: hvd.allreduce(np.ones(3, np.float32)), lambda: hvd.broadcast(np.ones(3, np.float32), 0),
          lambda: hvd.allgather(np.ones(3, np.float32))):
    try:
        f()
    except NotInitializedError as e:
        assert isinstance(e, ValueError) and isinstance(e, HorovodInternalError)
        assert "hvd.init()" in str(e), e
    else:
        raise SystemExit("no error from %r" % f)
assert not hvd.is_initialized()
print("ok")
"""
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_without_hvdrun_a_job_of_one() -> None:
    code = """
import numpy as np
import hvdrun.numpy as hvd
hvd.init()
assert hvd.size() == 1 and hvd.rank() == 0
a = np.arange(4, dtype=np.float32)
assert np.array_equal(hvd.allreduce(a, op=hvd.Sum), a)
hvd.shutdown()
assert not hvd.is_initialized()
print("ok")
"""
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_package_is_typed() -> None:
    import hvdrun
    assert os.path.exists(os.path.join(os.path.dirname(hvdrun.__file__), "py.typed"))


def test_torch_calls_before_init_raise() -> None:
    pytest.importorskip("torch")
    p = run_python("""
import torch, hvdrun.torch as hvd
for f in (hvd.rank, hvd.size, hvd.local_rank, hvd.barrier, lambda: hvd.allreduce(torch.ones(2)),
          lambda: hvd.allgather(torch.ones(2)), lambda: hvd.broadcast_(torch.ones(2), 0), lambda: hvd.join(),
          lambda: hvd.grouped_allreduce([torch.ones(2)]), lambda: hvd.alltoall(torch.ones(2)),
          lambda: hvd.reducescatter(torch.ones(2)), lambda: hvd.broadcast_object(1)):
    try:
        f()
    except hvd.NotInitializedError as e:
        assert isinstance(e, ValueError) and isinstance(e, hvd.HorovodInternalError) and "hvd.init()" in str(e)
    else:
        raise SystemExit(f"no error from {f}")
print("ok")
""")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_importing_hvdrun_before_torch_leaves_torch_its_own_nccl(torch_available: bool) -> None:
    """libhvdrun loads NCCL at its first device collective, never at import: importing
    hvdrun first must not hand torch another libnccl.so.2 (PyPI torch 2.x then failed to
    import: "undefined symbol: ncclCommResume")."""
    if not torch_available:
        pytest.skip("no torch in this interpreter")
    code = """
import hvdrun.numpy, hvdrun._capi as c
c.nccl_built(); c.nccl_version()
maps = open('/proc/self/maps').read()
assert 'libnccl' not in maps, 'libnccl mapped at import'
import torch
print('torch', torch.__version__)
if torch.cuda.is_available() or hasattr(torch.cuda, 'nccl') and torch.version.cuda:
    print('torch nccl', torch.cuda.nccl.version())
"""
    p = run_python(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("torch "), p.stdout
