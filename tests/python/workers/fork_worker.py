"""Forked children of a rank (issue 30.6): os.fork, multiprocessing's fork start method
(what a torch DataLoader's workers are), and, with torch, a DataLoader whose workers call
hvd.rank(). In each child hvd.rank()/size() answer the parent's values (as in Horovod),
a collective raises NotInitializedError at once, and hvd.shutdown() leaves the parent's
job alone; the parent's next allreduce is then right. Prints CHECK lines (checks.py)."""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import sys

from checks import check
from hvdrun import _basics as hvd
from hvdrun import _capi
from hvdrun.common.exceptions import NotInitializedError

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


def in_child(call_shutdown: bool) -> int:
    """The child's part: 0 when it saw what a forked child must see."""
    if (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.is_initialized()) != (RANK, SIZE, RANK, True):
        return 1
    x = (ctypes.c_float * 4)()
    try:
        _capi.allreduce(ctypes.addressof(x), ctypes.addressof(x), 4, _capi.FLOAT32, _capi.OP_SUM)
        return 2
    except NotInitializedError as e:
        if "is a fork of pid %d" % os.getppid() not in str(e) or "call hvd.init() first" in str(e):
            return 3
    if call_shutdown:
        hvd.shutdown()
        if hvd.is_initialized():
            return 4
    return 0


def parent_allreduce_is_right() -> None:
    x = (ctypes.c_float * 1024)(*([RANK + 1.0] * 1024))
    _capi.allreduce(ctypes.addressof(x), ctypes.addressof(x), 1024, _capi.FLOAT32, _capi.OP_SUM)
    assert all(v == SIZE * (SIZE + 1) / 2 for v in x), list(x[:4])


def _mp_target(call_shutdown: bool) -> None:
    sys.exit(in_child(call_shutdown))


@check
def os_fork_child_leaves_the_job_alone() -> None:
    for call_shutdown in (False, True):
        pid = os.fork()
        if pid == 0:
            os._exit(in_child(call_shutdown))
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status:#x}"
        parent_allreduce_is_right()


@check
def multiprocessing_fork_children_leave_the_job_alone() -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_mp_target, args=(i % 2 == 1,)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"child exit code {p.exitcode}"
    parent_allreduce_is_right()


@check
def dataloader_workers_read_the_rank() -> None:
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset
    except ImportError:
        return  # (no torch here: the multiprocessing check covers its workers' fork)
    import hvdrun.torch as thvd

    class Ranks(Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int):
            return torch.tensor([thvd.rank(), thvd.size()])

    got = torch.cat(list(DataLoader(Ranks(), batch_size=2, num_workers=2)))
    assert got.view(-1, 2).tolist() == [[RANK, SIZE]] * 8, got.tolist()
    parent_allreduce_is_right()


hvd.shutdown()
print("DONE", RANK, flush=True)
