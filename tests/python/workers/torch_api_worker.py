"""Every hvdrun.torch call on N ranks against a single-process reference: each rank makes
every rank's input itself (deterministic in the rank) and computes what the result must be."""
import sys
import warnings

import torch

import hvdrun.torch as hvd
from checks import check, select

select(sys.argv[1:])
torch.manual_seed(0)
hvd.init()
r, n = hvd.rank(), hvd.size()
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DTYPES = FLOATS + (torch.int32, torch.int64, torch.int8, torch.uint8)


def data(rank, dtype=torch.float32, shape=(4, 3)):
    t = torch.arange(int(torch.tensor(shape).prod())).reshape(shape) % 7 + rank + 1
    return t.to(dtype)


def close(a, b, dtype=torch.float32):
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-5)
    return a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)


@check
def topology():
    assert hvd.is_initialized() and 0 <= r < n
    assert (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()) == (r, n, 0, 1)
    assert isinstance(hvd.nccl_built(), int) and hvd.__version__


@check
def allreduce_ops_and_dtypes():
    allv = lambda dt: torch.stack([data(k, dt).double() for k in range(n)])  # noqa: E731
    for dt in DTYPES:
        for op, ref in ((hvd.Sum, lambda s: s.sum(0)), (hvd.Min, lambda s: s.min(0).values),
                        (hvd.Max, lambda s: s.max(0).values), (hvd.Product, lambda s: s.prod(0))):
            if dt in (torch.int8, torch.uint8) and op in (hvd.Sum, hvd.Product):
                continue
            x = data(r, dt)
            y = hvd.allreduce(x, op=op, name=f"ops.{dt}.{op}")
            assert close(y, ref(allv(dt)).to(dt), dt), (dt, op, y)
            assert torch.equal(x, data(r, dt)), "the input changed"
        if dt in FLOATS:
            y = hvd.allreduce(data(r, dt), name=f"avg.{dt}")
            assert close(y, allv(dt).mean(0).to(dt), dt), (dt, y)


@check
def allreduce_scales_and_average_keyword():
    y = hvd.allreduce(data(r), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert close(y, sum(data(k) for k in range(n)) * 1.5)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = hvd.allreduce(data(r), average=False)
        assert any(issubclass(x.category, DeprecationWarning) for x in w)
    assert close(y, sum(data(k) for k in range(n)))
    try:
        hvd.allreduce(data(r), average=True, op=hvd.Sum)
    except ValueError as e:
        assert "supersedes" in str(e)
    else:
        raise AssertionError("average= and op= together were accepted")


@check
def allreduce_in_place_and_async():
    x = data(r)
    assert hvd.allreduce_(x, op=hvd.Sum) is x and close(x, sum(data(k) for k in range(n)))
    x = data(r)
    h = hvd.allreduce_async(x, op=hvd.Max, name="amax")
    y = hvd.synchronize(h)
    assert close(y, data(n - 1)) and torch.equal(x, data(r))
    x = data(r)
    h = hvd.allreduce_async_(x, op=hvd.Sum, name="asum")
    while not hvd.poll(h):
        pass
    assert hvd.synchronize(h) is x and close(x, sum(data(k) for k in range(n)))
    assert hvd.synchronize(h) is None  # Horovod: a handle synchronized twice gives None


@check
def async_named_any_submission_order():
    """Named operations match by name: each rank submits them in its own order."""
    names = [f"t{i}" for i in range(12)]
    order = names if r % 2 == 0 else list(reversed(names))
    tensors = {nm: torch.full((1000 * (i + 1),), float(r + i)) for i, nm in enumerate(names)}
    handles = {nm: hvd.allreduce_async_(tensors[nm], name=nm, op=hvd.Sum) for nm in order}
    for i, nm in enumerate(names):
        out = hvd.synchronize(handles[nm])
        assert torch.all(out == float(sum(k + i for k in range(n)))), nm


@check
def grouped_allreduce_all_forms():
    xs = [data(r, torch.float32, (3,)), data(r, torch.float64, (2, 2)), data(r, torch.float32, (5,))]
    want = [sum(data(k, x.dtype, tuple(x.shape)) for k in range(n)) for x in xs]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum, name="g1")
    assert all(close(y, w, y.dtype) for y, w in zip(ys, want))
    ys = hvd.synchronize(hvd.grouped_allreduce_async(xs, op=hvd.Sum, name="g2"))
    assert all(close(y, w, y.dtype) for y, w in zip(ys, want))
    zs = [x.clone() for x in xs]
    out = hvd.grouped_allreduce_(zs, op=hvd.Sum, name="g3")
    assert all(o is z for o, z in zip(out, zs)) and all(close(z, w, z.dtype) for z, w in zip(zs, want))
    zs = [x.clone() for x in xs]
    hvd.synchronize(hvd.grouped_allreduce_async_(zs, name="g4"))
    assert all(close(z, w / n, z.dtype) for z, w in zip(zs, want))


@check
def allgather_per_rank_first_dims():
    x = data(r, torch.float32, (r + 1, 3))
    y = hvd.allgather(x)
    assert close(y, torch.cat([data(k, torch.float32, (k + 1, 3)) for k in range(n)]))
    y = hvd.synchronize(hvd.allgather_async(data(r, torch.int64, (2, 2, 2)), name="ag"))
    assert torch.equal(y, torch.cat([data(k, torch.int64, (2, 2, 2)) for k in range(n)]))
    y = hvd.allgather(torch.zeros((0, 4)) if r == 0 else torch.ones((1, 4)), name="ag0")
    assert y.shape == (n - 1, 4) and torch.all(y == 1)


@check
def broadcast_all_forms():
    for root in range(n):
        x = data(r)
        assert torch.equal(hvd.broadcast(x, root, name=f"b{root}"), data(root)) and torch.equal(x, data(r))
        assert hvd.broadcast_(x, root) is x and torch.equal(x, data(root))
        x = data(r, torch.float64)
        assert torch.equal(hvd.synchronize(hvd.broadcast_async(x, root)), data(root, torch.float64))
        hvd.synchronize(hvd.broadcast_async_(x, root, name=f"ba{root}"))
        assert torch.equal(x, data(root, torch.float64))


@check
def alltoall_with_and_without_splits():
    # Rank r sends (r + k + 1) rows to rank k: rows filled with 100 * r + k.
    splits = [r + k + 1 for k in range(n)]
    x = torch.cat([torch.full((s, 2), float(100 * r + k)) for k, s in enumerate(splits)])
    out, received = hvd.alltoall(x, splits=splits, name="a2a")
    want = torch.cat([torch.full((k + r + 1, 2), float(100 * k + r)) for k in range(n)])
    assert torch.equal(out, want) and received.tolist() == [k + r + 1 for k in range(n)], (out, received)
    x = torch.arange(2 * n, dtype=torch.float32) + 10 * r
    out = hvd.alltoall(x)
    assert torch.equal(out, torch.tensor([10.0 * k + 2 * r + j for k in range(n) for j in range(2)]))
    out, received = hvd.synchronize(hvd.alltoall_async(x, splits=torch.tensor([2] * n)))
    assert received.tolist() == [2] * n
    if n > 1:  # one rank takes any number of rows
        try:
            hvd.alltoall(torch.ones(2 * n + 1))
        except hvd.InvalidArgumentError as e:
            assert "multiple" in str(e)
        else:
            raise AssertionError("alltoall accepted rows that do not split evenly")


@check
def reducescatter_uneven_rows():
    rows = 2 * n + 1
    x = data(r, torch.float32, (rows, 3))
    total = sum(data(k, torch.float32, (rows, 3)) for k in range(n))
    counts = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    start = sum(counts[:r])
    y = hvd.reducescatter(x, op=hvd.Sum)
    assert close(y, total[start:start + counts[r]]), y
    y = hvd.reducescatter(x)  # Average
    assert close(y, total[start:start + counts[r]] / n)
    y = hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum, name="rs", prescale_factor=2.0, postscale_factor=0.5))
    assert close(y, total[start:start + counts[r]])


@check
def join_with_uneven_work():
    # Rank r does r + 1 allreduces, then joins: a joined rank adds zeros.
    for k in range(r + 1):
        y = hvd.allreduce(torch.ones(3), op=hvd.Sum, name=f"join.{k}")
        assert torch.all(y == float(n - k)), (k, y)
        y = hvd.allreduce(torch.ones(3), name=f"joinavg.{k}")
        assert torch.allclose(y, torch.full((3,), (n - k) / n)), (k, y)  # Average divides by size()
    assert hvd.join() == n - 1


@check
def barrier_and_objects():
    hvd.barrier()
    obj = {"rank": r, "list": list(range(r + 1))}
    assert hvd.broadcast_object(obj, root_rank=n - 1) == {"rank": n - 1, "list": list(range(n))}
    assert hvd.allgather_object(obj) == [{"rank": k, "list": list(range(k + 1))} for k in range(n)]


@check
def broadcast_parameters_and_optimizer_state():
    torch.manual_seed(r)  # different on every rank
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1), betas=(0.8 + 0.01 * r, 0.99))
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = [p.detach().clone() for p in model.state_dict().values()]
    theirs = hvd.broadcast_object([p for p in mine], root_rank=0)
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs))
    assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["betas"] == (0.8, 0.99)
    st = [(k, v.clone() if torch.is_tensor(v) else v) for s in opt.state_dict()["state"].values() for k, v in s.items()]
    root_st = hvd.broadcast_object(st, root_rank=0)
    assert all(k1 == k2 and (torch.equal(v1, v2) if torch.is_tensor(v1) else v1 == v2)
               for (k1, v1), (k2, v2) in zip(st, root_st))
    # A fresh optimizer (no state yet) gets state and the root's options too.
    opt2 = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.9)
    hvd.broadcast_optimizer_state(opt2, root_rank=0)
    assert opt2.param_groups[0]["lr"] == 0.1


@check
def autograd_through_collectives():
    x = data(r).requires_grad_()
    hvd.allreduce(x, op=hvd.Sum).sum().backward()
    assert torch.all(x.grad == n)
    x = data(r, torch.float32, (r + 1, 2)).requires_grad_()
    (hvd.allgather(x) * 2).sum().backward()
    assert torch.allclose(x.grad, torch.full_like(x, 2.0))
    x = data(r).requires_grad_()
    hvd.broadcast(x, 0).sum().backward()
    assert torch.all(x.grad == (1.0 if r == 0 else 0.0))


@check
def fp16_compression():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(r))
    y = hvd.allreduce(x, compression=hvd.Compression.fp16, op=hvd.Sum)
    want = sum(torch.randn(1000, generator=torch.Generator().manual_seed(k)) for k in range(n))
    assert y.dtype == torch.float32 and torch.allclose(y, want, atol=2e-2, rtol=1e-2)
    assert not torch.equal(y, want) or n == 1  # it did go through float16


@check
def sync_batch_norm_matches_full_batch():
    torch.manual_seed(7)
    full = torch.randn(4 * n, 3, 5)  # every rank's 4 samples
    w = torch.randn(4 * n, 3, 5)
    ref = torch.nn.BatchNorm1d(3)
    xr = full.clone().requires_grad_()
    ref_out = ref(xr)
    (ref_out * w).sum().backward()
    bn = hvd.SyncBatchNorm(3)
    x = full[4 * r:4 * r + 4].clone().requires_grad_()
    out = bn(x)
    (out * w[4 * r:4 * r + 4]).sum().backward()
    assert torch.allclose(out, ref_out[4 * r:4 * r + 4], atol=1e-5)
    assert torch.allclose(x.grad, xr.grad[4 * r:4 * r + 4], atol=1e-5)
    assert torch.allclose(bn.running_mean, ref.running_mean, atol=1e-6)
    assert torch.allclose(bn.running_var, ref.running_var, atol=1e-5)
    wgrad = hvd.allreduce(bn.weight.grad, op=hvd.Sum)
    assert torch.allclose(wgrad, ref.weight.grad, atol=1e-4)


@check
def bad_tensors_raise_clear_errors():
    cases = [(torch.ones(4, 4)[:, ::2], "not contiguous"), (torch.ones(3, dtype=torch.complex64), "not supported"),
             (torch.ones(3, dtype=torch.complex128), "not supported"),
             (torch.ones(3, device="meta"), "meta")]
    for t, what in cases:
        for f in (lambda: hvd.allreduce(t), lambda: hvd.broadcast_(t, 0), lambda: hvd.allgather(t)):
            try:
                f()
            except hvd.HorovodInternalError as e:
                assert what in str(e) and isinstance(e, ValueError), e
            else:
                raise AssertionError(f"no error for {what}")
    try:
        hvd.broadcast(torch.ones(2), n)
    except hvd.InvalidArgumentError as e:
        assert "root_rank" in str(e)
    else:
        raise AssertionError("root_rank out of range accepted")
    if not hvd.cuda_built() and torch.cuda.is_available():
        try:
            hvd.allreduce(torch.ones(2, device="cuda"))
        except hvd.InvalidArgumentError as e:
            assert "built without CUDA" in str(e)
        else:
            raise AssertionError("a CUDA tensor was accepted by a build without CUDA")


hvd.shutdown()
print(f"DONE {r}", flush=True)
