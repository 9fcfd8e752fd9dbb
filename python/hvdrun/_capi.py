"""The one ctypes boundary to libhvdrun's C API (include/hvdrun/hvdrun.h).

Everything else in the package calls these functions with plain integers (data pointers,
element counts, dtype and op codes); nothing else touches ctypes. Every call that returns
an HVD_ERR_* code is checked here and turned into an exception carrying
hvd_last_error()'s text. ctypes releases the GIL for the duration of each call, so a
blocking collective does not stop other Python threads.

Which libhvdrun is loaded, in order: $HVDRUN_LIBRARY (a path); the one installed inside
this package (pip install: hvdrun/lib/); the one a CMake install put under the same prefix
(hvdrun/_install_layout.py says where); the dynamic loader's search (LD_LIBRARY_PATH,
ld.so.cache) for libhvdrun.so.0.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple

from hvdrun import _env
from hvdrun.common.exceptions import HorovodInternalError, InvalidArgumentError, NotInitializedError, WorkerRemoved

# Error codes, dtypes and ops as in hvdrun.h (tests/python/test_capi_constants.py holds them equal).
SUCCESS = 0
ERR_NOT_INITIALIZED = 1
ERR_INVALID_ARGUMENT = 2
ERR_RENDEZVOUS = 3
ERR_AUTH = 4
ERR_TIMEOUT = 5
ERR_PEER = 6
ERR_MISMATCH = 7
ERR_UNSUPPORTED = 8
ERR_INTERNAL = 9
ERR_CUDA = 10
ERR_NCCL = 11
ERR_RESET = 12  # elastic: this round is being reset; every collective of it fails; shutdown(), then init()
ERR_REMOVED = 13  # elastic: init(): this worker's slot was removed from the job
_ERR_NAMES = {v: "HVD_" + k for k, v in list(globals().items()) if k.startswith("ERR_")}

# hvd_elastic_updates' kinds
HOSTS_ADDED = 1
HOSTS_REMOVED = 2

# hvd_dtype_t
INT8, UINT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64, INT16, BOOL = range(10)
DTYPE_NAMES = {INT8: "int8", UINT8: "uint8", INT32: "int32", INT64: "int64", FLOAT16: "float16",
               BFLOAT16: "bfloat16", FLOAT32: "float32", FLOAT64: "float64", INT16: "int16", BOOL: "bool"}
DTYPE_SIZES = {INT8: 1, UINT8: 1, INT32: 4, INT64: 8, FLOAT16: 2, BFLOAT16: 2, FLOAT32: 4, FLOAT64: 8, INT16: 2,
               BOOL: 1}
# hvd_op_t
OP_SUM, OP_AVERAGE, OP_MIN, OP_MAX, OP_PRODUCT = range(5)

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_longlong_p = ctypes.POINTER(ctypes.c_longlong)
_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_handle = ctypes.c_longlong
_c_handle_p = ctypes.POINTER(_c_handle)
_c_voidp_p = ctypes.POINTER(ctypes.c_void_p)

# name -> (restype, argtypes)
_PROTOTYPES = {
    "hvd_init": (ctypes.c_int, []),
    "hvd_shutdown": (ctypes.c_int, []),
    "hvd_initialized": (ctypes.c_int, []),
    "hvd_rank": (ctypes.c_int, []),
    "hvd_size": (ctypes.c_int, []),
    "hvd_local_rank": (ctypes.c_int, []),
    "hvd_local_size": (ctypes.c_int, []),
    "hvd_cross_rank": (ctypes.c_int, []),
    "hvd_cross_size": (ctypes.c_int, []),
    "hvd_barrier": (ctypes.c_int, []),
    "hvd_allreduce": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]),
    "hvd_broadcast": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]),
    "hvd_allgather": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]),
    "hvd_last_error": (ctypes.c_char_p, []),
    # The asynchronous engine.
    "hvd_allreduce_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                           ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_double,
                                           _c_handle_p]),
    "hvd_broadcast_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_int, _c_handle_p]),
    "hvd_poll": (ctypes.c_int, [_c_handle]),
    "hvd_wait": (ctypes.c_int, [_c_handle]),
    "hvd_join": (ctypes.c_int, [_c_int_p]),
    "hvd_grouped_allreduce_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, _c_voidp_p, _c_voidp_p,
                                                   _c_size_p, ctypes.c_int, ctypes.c_int, ctypes.c_double,
                                                   ctypes.c_double, _c_handle_p]),
    "hvd_grouped_allreduce_dtypes_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, _c_voidp_p, _c_voidp_p,
                                                          _c_size_p, _c_int_p, ctypes.c_int, ctypes.c_double,
                                                          ctypes.c_double, _c_handle_p]),
    "hvd_allgatherv_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                            ctypes.c_int, _c_handle_p]),
    "hvd_alltoall_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                          _c_size_p, ctypes.c_int, _c_handle_p]),
    "hvd_reducescatter_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                               ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _c_handle_p]),
    "hvd_result_rows": (ctypes.c_int, [_c_handle, _c_size_p]),
    "hvd_wait_result": (ctypes.c_int, [_c_handle, ctypes.c_void_p]),
    # Shapes and process sets.
    "hvd_next_call": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, _c_int_p, ctypes.POINTER(ctypes.c_longlong)]),
    "hvd_add_process_set": (ctypes.c_int, [_c_int_p, ctypes.c_int, _c_int_p]),
    "hvd_init_process_sets": (ctypes.c_int, [_c_int_p, _c_int_p, ctypes.c_int]),
    "hvd_remove_process_set": (ctypes.c_int, [ctypes.c_int]),
    "hvd_process_set_info": (ctypes.c_int, [ctypes.c_int, _c_int_p, _c_int_p, _c_int_p]),
    "hvd_process_set_ids": (ctypes.c_int, [_c_int_p, ctypes.c_int, _c_int_p]),
    "hvd_nccl_built": (ctypes.c_int, []),
    "hvd_cuda_built": (ctypes.c_int, []),
    "hvd_nccl_version": (ctypes.c_int, []),
    "hvd_version": (ctypes.c_char_p, []),
    # Elastic jobs (older libraries lack them: then no job is elastic).
    "hvd_elastic": (ctypes.c_int, []),
    "hvd_elastic_updates": (ctypes.c_int, [_c_longlong_p, _c_int_p]),
    "hvd_elastic_commit": (ctypes.c_int, [ctypes.c_longlong]),
}


def _candidates() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    out: List[str] = []
    # pip install: libhvdrun inside the package.
    out += sorted(glob.glob(os.path.join(here, "lib", "libhvdrun.so*")))
    # cmake --install: the library directory of the same prefix.
    try:
        from hvdrun import _install_layout  # written by `cmake --install`

        libdir = os.path.normpath(os.path.join(here, _install_layout.LIBDIR_FROM_PACKAGE))
        out += sorted(glob.glob(os.path.join(libdir, "libhvdrun.so*")))
    except ImportError:
        pass
    out.append("libhvdrun.so.0")  # the dynamic loader's own search
    return out


def _load() -> Tuple[ctypes.CDLL, str]:
    env = _env.library()
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError(f"hvdrun: HVDRUN_LIBRARY={env!r} cannot be loaded: {e}") from None
    tried = []
    for c in _candidates():
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            tried.append(f"{c} ({e})")
    raise ImportError("hvdrun: libhvdrun not found; tried " + "; ".join(tried) +
                      ". Install hvdrun (pip install, or cmake --install) or set HVDRUN_LIBRARY to libhvdrun.so")


_lib, library_path = _load()
_fns: dict = {}
_fns_lock = threading.Lock()


def _fn(name: str) -> Callable:
    f = _fns.get(name)
    if f is not None:
        return f
    with _fns_lock:
        try:
            f = getattr(_lib, name)
        except AttributeError:
            raise HorovodInternalError(
                f"{name} is not in {library_path}: this libhvdrun is older than the hvdrun Python package "
                f"(rebuild and reinstall both)") from None
        f.restype, f.argtypes = _PROTOTYPES[name]
        _fns[name] = f
        return f


def has(name: str) -> bool:
    """Whether the loaded libhvdrun exports `name`."""
    return hasattr(_lib, name)


def last_error() -> str:
    msg = _fn("hvd_last_error")()
    return msg.decode(errors="replace") if msg else ""


def error_for(rc: int, what: str) -> BaseException:
    """The exception for return code rc of call `what` (reads hvd_last_error on this thread)."""
    detail = last_error() or "no detail"
    text = f"{what} failed: {detail} ({_ERR_NAMES.get(rc, 'error %d' % rc)})"
    if rc == ERR_NOT_INITIALIZED and not initialized():
        text += "; call hvd.init() first"  # (a forked child of a rank is initialized but runs no collectives)
    return exception(rc, text)


def exception(rc: int, text: str) -> BaseException:
    """The exception for return code rc, with its text; `.code` is rc. In an elastic job
    ERR_RESET and ERR_PEER are HorovodInternalError, which hvd.elastic.run recovers from;
    ERR_REMOVED is WorkerRemoved, a SystemExit of status 0."""
    if rc == ERR_REMOVED:
        return WorkerRemoved(text)
    e = {ERR_NOT_INITIALIZED: NotInitializedError, ERR_INVALID_ARGUMENT: InvalidArgumentError}.get(
        rc, HorovodInternalError)(text)
    e.code = rc
    return e


def _check(rc: int, what: str) -> None:
    if rc != SUCCESS:
        raise error_for(rc, what)


def _bname(name: str) -> bytes:
    b = name.encode()
    if b"\0" in b:
        _fn("hvd_next_call")(0, 0, None, None)  # the refused call takes hvd_next_call's description
        raise InvalidArgumentError(f"collective name {name!r} contains a NUL character")
    return b


# --- Process and job ----------------------------------------------------------------------
def init() -> None:
    _check(_fn("hvd_init")(), "hvd_init")


def shutdown() -> None:
    _check(_fn("hvd_shutdown")(), "hvd_shutdown")


def initialized() -> bool:
    return bool(_fn("hvd_initialized")())


def topology(which: str) -> int:
    """hvd_rank, hvd_size, ...: -1 before init."""
    return int(_fn("hvd_" + which)())


def nccl_built() -> bool:
    return has("hvd_nccl_built") and bool(_fn("hvd_nccl_built")())


def nccl_version() -> int:
    """NCCL_VERSION_CODE libhvdrun was built against; 0 without NCCL."""
    return int(_fn("hvd_nccl_version")()) if has("hvd_nccl_version") else 0


def cuda_built() -> bool:
    return has("hvd_cuda_built") and bool(_fn("hvd_cuda_built")())


def elastic() -> bool:
    """Whether this process is a worker of an elastic job (hvdrun --min-np/--max-np/...)."""
    return has("hvd_elastic") and _fn("hvd_elastic")() == 1


def elastic_updates() -> Tuple[int, int]:
    """(seq, kinds): the newest membership change this worker has been told of (0: none)
    and the HOSTS_ADDED | HOSTS_REMOVED bits of every change after the one this round was
    formed at. Never blocks; (0, 0) outside an elastic job."""
    if not has("hvd_elastic_updates"):
        return 0, 0
    seq, kinds = ctypes.c_longlong(0), ctypes.c_int(0)
    _check(_fn("hvd_elastic_updates")(ctypes.byref(seq), ctypes.byref(kinds)), "hvd_elastic_updates")
    return int(seq.value), int(kinds.value)


def elastic_commit(commit: int) -> None:
    """Tells hvdrun which commit this worker's round starts from (hvd.elastic.run's rank 0,
    once per round): hvdrun's reset line names it. Nothing outside an elastic job."""
    if has("hvd_elastic_commit"):
        _check(_fn("hvd_elastic_commit")(commit), "hvd_elastic_commit")


def version() -> Optional[str]:
    if not has("hvd_version"):
        return None
    v = _fn("hvd_version")()
    return v.decode() if v else None


# --- Blocking collectives (ranks call them in the same order) --------------------------------
def barrier() -> None:
    _check(_fn("hvd_barrier")(), "hvd_barrier")


def allreduce(send: int, recv: int, count: int, dtype: int, op: int) -> None:
    _check(_fn("hvd_allreduce")(send, recv, count, dtype, op), "hvd_allreduce")


def allreduce_int64(values: Sequence[int], op: int) -> List[int]:
    """The reduction of a few int64 `values` over every rank (a blocking hvd_allreduce)."""
    n = len(values)
    send, recv = (ctypes.c_int64 * n)(*values), (ctypes.c_int64 * n)()
    allreduce(ctypes.addressof(send), ctypes.addressof(recv), n, INT64, op)
    return list(recv)


def broadcast(buf: int, count: int, dtype: int, root: int) -> None:
    _check(_fn("hvd_broadcast")(buf, count, dtype, root), "hvd_broadcast")


def allgather(send: int, recv: int, count: int, dtype: int) -> None:
    _check(_fn("hvd_allgather")(send, recv, count, dtype), "hvd_allgather")


def join() -> int:
    last = ctypes.c_int(-1)
    _check(_fn("hvd_join")(ctypes.byref(last)), "hvd_join")
    return last.value


# --- The asynchronous engine: named operations, handles ------------------------------------
def allreduce_async(name: str, send: int, recv: int, count: int, dtype: int, op: int, prescale: float,
                    postscale: float) -> int:
    h = _c_handle(0)
    _check(_fn("hvd_allreduce_async")(_bname(name), send, recv, count, dtype, op, prescale, postscale,
                                      ctypes.byref(h)), f"allreduce {name!r}")
    return h.value


def broadcast_async(name: str, buf: int, count: int, dtype: int, root: int) -> int:
    h = _c_handle(0)
    _check(_fn("hvd_broadcast_async")(_bname(name), buf, count, dtype, root, ctypes.byref(h)),
           f"broadcast {name!r}")
    return h.value


def _group_arrays(sends: Sequence[int], recvs: Sequence[int], counts: Sequence[int]) -> Tuple[int, Any, Any, Any]:
    """A group's buffers and counts as the C arrays the grouped calls take."""
    n = len(sends)
    return n, (ctypes.c_void_p * n)(*sends), (ctypes.c_void_p * n)(*recvs), (ctypes.c_size_t * n)(*counts)


def grouped_allreduce_async(name: str, sends: Sequence[int], recvs: Sequence[int], counts: Sequence[int],
                            dtype: int, op: int, prescale: float, postscale: float) -> int:
    n, s, r, c = _group_arrays(sends, recvs, counts)
    h = _c_handle(0)
    _check(_fn("hvd_grouped_allreduce_async")(_bname(name), n, s, r, c, dtype, op, prescale, postscale,
                                              ctypes.byref(h)), f"grouped allreduce {name!r}")
    return h.value


def grouped_allreduce_dtypes_async(name: str, sends: Sequence[int], recvs: Sequence[int], counts: Sequence[int],
                                   dtypes: Sequence[int], op: int, prescale: float, postscale: float) -> int:
    """A grouped allreduce with each tensor's dtype: one operation, checked tensor by tensor
    against the other ranks' (a mismatch fails it on every rank at once)."""
    n, s, r, c = _group_arrays(sends, recvs, counts)
    d = (ctypes.c_int * n)(*dtypes)
    h = _c_handle(0)
    _check(_fn("hvd_grouped_allreduce_dtypes_async")(_bname(name), n, s, r, c, d, op, prescale, postscale,
                                                     ctypes.byref(h)), f"grouped allreduce {name!r}")
    return h.value


def allgatherv_async(name: str, send: int, rows: int, row_elems: int, dtype: int) -> int:
    h = _c_handle(0)
    _check(_fn("hvd_allgatherv_async")(_bname(name), send, rows, row_elems, dtype, ctypes.byref(h)),
           f"allgather {name!r}")
    return h.value


def alltoall_async(name: str, send: int, rows: int, row_elems: int, splits: Optional[Sequence[int]],
                   dtype: int) -> int:
    sp = (ctypes.c_size_t * len(splits))(*splits) if splits is not None else None
    h = _c_handle(0)
    _check(_fn("hvd_alltoall_async")(_bname(name), send, rows, row_elems, sp, dtype, ctypes.byref(h)),
           f"alltoall {name!r}")
    return h.value


def reducescatter_async(name: str, send: int, recv: int, rows: int, row_elems: int, dtype: int, op: int) -> int:
    h = _c_handle(0)
    _check(_fn("hvd_reducescatter_async")(_bname(name), send, recv, rows, row_elems, dtype, op, ctypes.byref(h)),
           f"reducescatter {name!r}")
    return h.value


def poll(handle: int) -> int:
    """1 finished, 0 pending, -1 unknown handle."""
    return int(_fn("hvd_poll")(handle))


def wait(handle: int, what: str) -> None:
    _check(_fn("hvd_wait")(handle), what)


def result_rows(handle: int, nranks: int, what: str) -> List[int]:
    rows = (ctypes.c_size_t * nranks)()
    _check(_fn("hvd_result_rows")(handle, rows), what)
    return list(rows)


def wait_result(handle: int, recv: int, what: str) -> None:
    _check(_fn("hvd_wait_result")(handle, recv), what)


# --- Shapes and process sets ----------------------------------------------------------------
def next_call(process_set: int, shapes: Sequence[Sequence[int]]) -> None:
    """Describes the next collective this thread submits: its process set and its tensors'
    shapes (which the ranks then agree on, as Horovod's do). In the global set, tensors of one
    dimension need none: their counts say as much (and the call saves its cost); a 0-d tensor
    has a shape of its own (Horovod's [] is not [1]). A training step describes the same
    shapes every step: their ctypes arrays are built once (_call_shapes) and reused."""
    if len(shapes) == 1:  # the common case, without generators
        if process_set == 0 and len(shapes[0]) == 1:
            return
        key: Tuple[Any, ...] = (process_set, tuple(shapes[0]))
    elif process_set == 0 and all(len(s) == 1 for s in shapes):
        return
    else:
        key = (process_set, *map(tuple, shapes))
    args = _call_shapes.get(key)
    if args is None:
        args = _call_shapes_arguments(process_set, shapes)
        if len(_call_shapes) >= _CALL_SHAPES_KEPT:
            _call_shapes.clear()
        _call_shapes[key] = args
    _check(_fn("hvd_next_call")(*args), "hvd_next_call")


_CALL_SHAPES_KEPT = 4096  # distinct (process set, shapes) descriptions kept; more start over
_call_shapes: dict = {}


def _call_shapes_arguments(process_set: int, shapes: Sequence[Sequence[int]]) -> Tuple[Any, ...]:
    n = len(shapes)
    flat = [int(d) for s in shapes for d in s]
    return (process_set, n, (ctypes.c_int * n)(*[len(s) for s in shapes]), (ctypes.c_longlong * len(flat))(*flat))


def add_process_set(ranks: Sequence[int]) -> int:
    out = ctypes.c_int(-1)
    _check(_fn("hvd_add_process_set")((ctypes.c_int * len(ranks))(*ranks), len(ranks), ctypes.byref(out)),
           "hvd_add_process_set")
    return out.value


def init_process_sets(sets: Sequence[Sequence[int]]) -> None:
    flat = [r for s in sets for r in s]
    _check(_fn("hvd_init_process_sets")((ctypes.c_int * len(flat))(*flat), (ctypes.c_int * len(sets))(*map(len, sets)),
                                        len(sets)), "hvd_init_process_sets")


def remove_process_set(process_set: int) -> None:
    _check(_fn("hvd_remove_process_set")(process_set), "hvd_remove_process_set")


def process_set_info(process_set: int) -> Tuple[int, List[int]]:
    """(this rank's place in the set or -1, the set's ranks)."""
    r, n = ctypes.c_int(-1), ctypes.c_int(0)
    _check(_fn("hvd_process_set_info")(process_set, ctypes.byref(r), ctypes.byref(n), None), "hvd_process_set_info")
    ranks = (ctypes.c_int * n.value)()
    _check(_fn("hvd_process_set_info")(process_set, ctypes.byref(r), ctypes.byref(n), ranks), "hvd_process_set_info")
    return r.value, list(ranks)


def process_set_ids() -> List[int]:
    n = ctypes.c_int(0)
    _check(_fn("hvd_process_set_ids")(None, 0, ctypes.byref(n)), "hvd_process_set_ids")
    ids = (ctypes.c_int * n.value)()
    _check(_fn("hvd_process_set_ids")(ids, n.value, ctypes.byref(n)), "hvd_process_set_ids")
    return list(ids)
