"""hvdrun.numpy on N ranks, each result against a single-process reference."""
import numpy as np

import hvdrun.numpy as hvd
from checks import check

hvd.init()
r, n = hvd.rank(), hvd.size()


def data(rank: int, dtype=np.float32, shape=(3, 5)) -> np.ndarray:
    return (np.arange(np.prod(shape)).reshape(shape) * (rank + 1) + rank).astype(dtype)


@check
def topology():
    assert 0 <= r < n and hvd.local_rank() == r and hvd.local_size() == n
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1 and hvd.is_initialized()


@check
def allreduce_ops():
    for dt in (np.float32, np.float64, np.int32, np.int64, np.float16, np.int8, np.uint8, np.int16):
        ref = [data(k, dt) for k in range(n)]
        for op, f in ((hvd.Sum, lambda a: np.sum(a, axis=0)), (hvd.Min, lambda a: np.min(a, axis=0)),
                      (hvd.Max, lambda a: np.max(a, axis=0)), (hvd.Product, lambda a: np.prod(a, axis=0))):
            if dt in (np.int8, np.uint8) and op in (hvd.Sum, hvd.Product) or dt == np.int16 and op == hvd.Product:
                continue  # overflow wraps differently from numpy's promotion
            got = hvd.allreduce(data(r, dt), op=op)
            want = f(np.stack(ref)).astype(dt)
            assert got.dtype == dt and np.allclose(got, want, rtol=1e-2 if dt == np.float16 else 1e-6), (dt, op)
    got = hvd.allreduce(data(r))
    assert np.allclose(got, np.mean(np.stack([data(k) for k in range(n)]), axis=0))


@check
def allreduce_in_place():
    a = data(r)
    out = hvd.allreduce_(a, op=hvd.Sum)
    assert out is a and np.allclose(a, sum(data(k) for k in range(n)))


@check
def broadcast():
    for root in range(n):
        a = data(r)
        b = hvd.broadcast(a, root)
        assert np.array_equal(b, data(root)) and np.array_equal(a, data(r))
        hvd.broadcast_(a, root)
        assert np.array_equal(a, data(root))


@check
def allgather():
    got = hvd.allgather(data(r, np.float64))
    assert np.array_equal(got, np.concatenate([data(k, np.float64) for k in range(n)]))


@check
def bad_arguments():
    for bad, what in ((np.ones((4, 4), np.float32)[:, ::2], "not C-contiguous"),
                      (np.ones(3, np.complex64), "not supported"), (np.ones(3, np.uint16), "not supported")):
        try:
            hvd.allreduce(bad)
        except hvd.InvalidArgumentError as e:
            assert what in str(e), e
            assert isinstance(e, ValueError) and isinstance(e, hvd.HorovodInternalError)
        else:
            raise AssertionError(f"no error for {what}")
    try:
        hvd.broadcast(np.ones(2, np.float32), n)
    except hvd.InvalidArgumentError as e:
        assert "root" in str(e), e
    else:
        raise AssertionError("no error for a root rank out of range")


@check
def barrier():
    hvd.barrier()


hvd.shutdown()
print(f"DONE {r}", flush=True)
