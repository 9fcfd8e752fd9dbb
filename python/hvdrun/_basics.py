"""init, shutdown and the job's topology, shared by hvdrun.torch and hvdrun.numpy."""

from __future__ import annotations

from typing import Any

from hvdrun import _capi, _env
from hvdrun.common.exceptions import NotInitializedError

_NOT_INITIALIZED = "hvdrun has not been initialized; use hvd.init()."


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Joins the job hvdrun started (its rendezvous); a program started without hvdrun is
    a job of size 1. Horovod's `comm` (an MPI communicator) is not supported.
    `process_sets`: a list of hvd.ProcessSet to register (every rank passes the same sets),
    or "dynamic" (HOROVOD_DYNAMIC_PROCESS_SETS=1: hvd.add_process_set later)."""
    from hvdrun.common import process_sets as ps  # (it imports this module's users)

    if comm is not None:
        raise ValueError("hvd.init(comm=...): hvdrun takes no MPI communicator; start the job with hvdrun")
    if isinstance(process_sets, str) and process_sets.lower() == "dynamic":
        process_sets = []
        _env.allow_dynamic_process_sets()
    sets = list(process_sets or [])
    if any(not isinstance(s, ps.ProcessSet) for s in sets):
        raise ValueError("hvd.init(process_sets=...): expected a list of hvd.ProcessSet or \"dynamic\"")
    _capi.init()
    if sets:
        _capi.init_process_sets([s.ranks for s in sets])
    ps._init_process_sets(sets)


def shutdown() -> None:
    """Leaves the job; harmless when not initialized."""
    if _capi.initialized():
        _capi.shutdown()


def is_initialized() -> bool:
    return _capi.initialized()


def _topology(which: str) -> int:
    v = _capi.topology(which)
    if v < 0:
        raise NotInitializedError(_NOT_INITIALIZED)
    return v


def require_init() -> None:
    if not _capi.initialized():
        raise NotInitializedError(_NOT_INITIALIZED)


def rank() -> int:
    return _topology("rank")


def size() -> int:
    return _topology("size")


def local_rank() -> int:
    return _topology("local_rank")


def local_size() -> int:
    return _topology("local_size")


def cross_rank() -> int:
    return _topology("cross_rank")


def cross_size() -> int:
    return _topology("cross_size")


def is_homogeneous() -> bool:
    """Whether every host runs the same number of ranks."""
    return size() == local_size() * cross_size()


def nccl_built() -> int:
    """As Horovod's: the NCCL_VERSION_CODE libhvdrun was built against (e.g. 21803), 0
    without NCCL (programs compare it with versions, as Horovod's tests do with 2700)."""
    return _capi.nccl_version()


def cuda_built() -> bool:
    return _capi.cuda_built()


# Horovod's build and run queries answer as Horovod built for CPUs with Gloo (and without
# MPI) answers under horovodrun: hvdrun's TCP ring is the CPU transport that build's Gloo
# is, and programs (Horovod's own tests among them) pick their paths by these answers.
def mpi_built() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


def gloo_built() -> bool:
    return True


def gloo_enabled() -> bool:
    return True


def mpi_threads_supported() -> bool:
    """Raises ValueError, as Horovod does when MPI is not enabled."""
    raise ValueError("Horovod MPI is not enabled; Please make sure it's installed and enabled.")


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


def _get_process_set_ids_and_ranks() -> dict:
    """Horovod's basics call (hvd.mpi_ops._basics): {process set id: its ranks}."""
    from hvdrun.common import process_sets

    return process_sets._get_process_set_ids_and_ranks()
