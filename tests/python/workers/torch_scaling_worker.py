"""hvdrun.torch's prescale, postscale and Average on integer tensors, against Horovod
0.28.1's rule (ScaleBuffer: each element times the factor in float64, truncated toward
zero, the result of the tensor's own dtype; Average: the sum times postscale / size()),
and bad arguments refused by the call itself. Every refused call is named 'refused.*':
the test reads the job's timeline to see that none of them was submitted."""
import sys

import torch

import hvdrun.torch as hvd
from checks import check, select

select(sys.argv[1:])
hvd.init()
r, n = hvd.rank(), hvd.size()
INTS = (torch.int32, torch.int64)
SCALES = ((0.75, 1.0), (1.0, 0.3), (-1.5, 2.5), (1.0, 1.0))
REDUCE = {hvd.Sum: lambda s: s.sum(0), hvd.Average: lambda s: s.sum(0), hvd.Min: lambda s: s.min(0).values,
          hvd.Max: lambda s: s.max(0).values}


def data(rank, dtype, rows, cols=3):
    # Negative and positive values: truncation toward zero differs from flooring there.
    return ((torch.arange(rows * cols).reshape(rows, cols) % 11) - 5 + rank).to(dtype)


def hscale(t, f):
    """Horovod's ScaleBuffer on an integer tensor: the float64 product, truncated toward zero."""
    return torch.trunc(t.double() * f).to(t.dtype)


def reference(dtype, rows, op, pre, post):
    stack = torch.stack([hscale(data(k, dtype, rows), pre) for k in range(n)])
    return hscale(REDUCE[op](stack).to(dtype), post / n if op == hvd.Average else post)


def mine(rows):
    counts = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    start = sum(counts[:r])
    return slice(start, start + counts[r])


def same(got, want):
    assert got.dtype == want.dtype, f"dtype {got.dtype}, want {want.dtype}"
    assert got.shape == want.shape, f"shape {tuple(got.shape)}, want {tuple(want.shape)}"
    bad = (got != want).nonzero()
    if bad.numel():
        i = tuple(bad[0].tolist())
        raise AssertionError(f"{bad.shape[0]} of {want.numel()} elements wrong; at {i}: {got[i]}, want {want[i]}")


@check
def reducescatter_integer_prescale_issue_case():
    # The issue's case: 3s, Sum, prescale 2.0: 2 * 3 * size() each (4,000,000 crashed a rank).
    for dt in INTS:
        for count in (1000, 4_000_000):
            y = hvd.reducescatter(torch.full((count,), 3, dtype=dt), op=hvd.Sum, prescale_factor=2.0)
            same(y, torch.full((mine(count).stop - mine(count).start,), 6 * n, dtype=dt))


@check
def reducescatter_integer_scaling_as_horovod():
    rows = 2 * n + 1
    for dt in INTS:
        for op in (hvd.Sum, hvd.Average):
            for pre, post in SCALES:
                want = reference(dt, rows, op, pre, post)[mine(rows)]
                x = data(r, dt, rows)
                same(hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post), want)
                h = hvd.reducescatter_async(x, op=op, name=f"rs.{dt}.{op}.{pre}.{post}", prescale_factor=pre,
                                            postscale_factor=post)
                same(hvd.synchronize(h), want)
                same(x, data(r, dt, rows))  # the input is left alone


@check
def allreduce_integer_scaling_as_horovod():
    for dt in INTS:
        for op in REDUCE:
            for pre, post in SCALES:
                want = reference(dt, 4, op, pre, post)
                kw = dict(op=op, prescale_factor=pre, postscale_factor=post)
                x = data(r, dt, 4)
                same(hvd.allreduce(x, **kw), want)
                same(hvd.synchronize(hvd.allreduce_async(x, **kw)), want)
                same(x, data(r, dt, 4))
                z = data(r, dt, 4)
                assert hvd.allreduce_(z, **kw) is z
                same(z, want)
                z = data(r, dt, 4)
                hvd.synchronize(hvd.allreduce_async_(z, **kw))
                same(z, want)


@check
def grouped_allreduce_mixed_dtypes_scaling_as_horovod():
    pre, post = 0.75, 2.5
    for op in (hvd.Sum, hvd.Average):
        specs = [(torch.float32, 3), (torch.int32, 2), (torch.int64, 5), (torch.float64, 1)]
        div = n if op == hvd.Average else 1
        wants = [reference(dt, rows, op, pre, post) if dt in INTS else
                 (sum(data(k, dt, rows).double() * pre for k in range(n)) * post / div).to(dt) for dt, rows in specs]

        def agree(ys):
            for y, want in zip(ys, wants):
                if want.is_floating_point():
                    assert y.dtype == want.dtype and torch.allclose(y, want, rtol=1e-5, atol=1e-5), (y, want)
                else:
                    same(y, want)

        kw = dict(op=op, prescale_factor=pre, postscale_factor=post)
        agree(hvd.grouped_allreduce([data(r, dt, rows) for dt, rows in specs], **kw))
        agree(hvd.synchronize(hvd.grouped_allreduce_async([data(r, dt, rows) for dt, rows in specs], **kw)))
        zs = [data(r, dt, rows) for dt, rows in specs]
        out = hvd.grouped_allreduce_(zs, **kw)
        assert all(o is z for o, z in zip(out, zs))
        agree(zs)
        zs = [data(r, dt, rows) for dt, rows in specs]
        hvd.synchronize(hvd.grouped_allreduce_async_(zs, **kw))
        agree(zs)


@check
def bad_arguments_refused_by_the_call():
    x = data(r, torch.int64, 2 * n)
    f = data(r, torch.float32, 2 * n)
    cases = {
        "rs_postscale_none": (lambda nm: hvd.reducescatter_async(x, op=hvd.Sum, name=nm, postscale_factor=None),
                              "postscale_factor None"),
        "rs_postscale_text": (lambda nm: hvd.reducescatter_async(f, name=nm, postscale_factor="2"),
                              "postscale_factor '2'"),
        "rs_prescale_nan": (lambda nm: hvd.reducescatter_async(f, name=nm, prescale_factor=float("nan")),
                            "prescale_factor nan"),
        "rs_op_min": (lambda nm: hvd.reducescatter_async(f, op=hvd.Min, name=nm), "hvd.Average or hvd.Sum"),
        "ar_int_prescale_inf": (lambda nm: hvd.allreduce_async(x, name=nm, prescale_factor=float("inf")),
                                "prescale_factor inf"),
        "ar_postscale_text": (lambda nm: hvd.allreduce_async_(f.clone(), name=nm, postscale_factor="x"),
                              "postscale_factor 'x'"),
        "grouped_postscale_none": (lambda nm: hvd.grouped_allreduce_async([f, x], name=nm, postscale_factor=None),
                                   "postscale_factor None"),
        "bcast_root_text": (lambda nm: hvd.broadcast_async(f, "0", name=nm), "root_rank '0'"),
        # A bad entry late in the list: the earlier ones must not have been broadcast.
        "bp_complex": (lambda nm: hvd.broadcast_parameters([(nm + ".a", f.clone()), (nm + ".b", torch.ones(2)),
                                                            (nm + ".c", torch.ones(2, dtype=torch.complex64))], 0),
                       "complex64 is not supported"),
        "bp_name_twice": (lambda nm: hvd.broadcast_parameters([(nm, f.clone()), (nm, torch.ones(2))], 0),
                          "more than once"),
        "bp_root": (lambda nm: hvd.broadcast_parameters({nm: f.clone()}, n), f"root_rank {n}"),
    }
    for case, (call, says) in cases.items():
        try:
            h = call(f"refused.{case}")
        except hvd.InvalidArgumentError as e:
            assert says in str(e), f"{case}: {e}"
        except Exception as e:  # noqa: BLE001 - the verdict names it
            raise AssertionError(f"{case}: {type(e).__name__}: {e}, not InvalidArgumentError")
        else:
            try:
                if h is not None:
                    hvd.synchronize(h)
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"{case}: accepted at the call, refused after the collective ran: {e!r}")
            raise AssertionError(f"{case}: accepted")
    # Unnamed calls still pair up across ranks, and the timeline has this one's name.
    assert torch.equal(hvd.allreduce(f, op=hvd.Sum, name="accepted"), sum(data(k, torch.float32, 2 * n)
                                                                         for k in range(n)))


hvd.shutdown()
print(f"DONE {r}", flush=True)
