"""Issue 29.4 and 29.6 on 3 ranks: shapes in the negotiation, and process sets (argv[1]:
"static": hvd.init(process_sets=[...]); "dynamic": hvd.add_process_set after init)."""
import sys

import torch

import hvdrun.torch as hvd
from checks import check

MODE = sys.argv[1]
if MODE == "static":
    # Repeats are refused as Horovod refuses them (after the sets are registered).
    try:
        hvd.init(process_sets=[hvd.ProcessSet([0]), hvd.ProcessSet([2, 1]), hvd.ProcessSet([0, 1, 2])])
        print("NO ERROR for a repeated set", flush=True)
    except ValueError:
        pass
    single, pair = hvd.ProcessSet([0]), hvd.ProcessSet([2, 1])
    hvd.init(process_sets=[single, pair])
else:
    hvd.init()
    single, pair = hvd.add_process_set([0]), hvd.add_process_set(hvd.ProcessSet(range(2, 0, -1)))
r = hvd.rank()
mine = single if r == 0 else pair


def fails_everywhere(call, text):
    try:
        call()
    except RuntimeError as e:
        assert text in str(e), e
        return
    raise AssertionError("no error")


@check
def shapes_are_negotiated_not_only_counts():
    x = torch.ones(17, 1311) if r == 0 else torch.ones(17, 23, 57)
    fails_everywhere(lambda: hvd.allreduce(x, name="shape"),
                     "mismatched tensor shapes: [17,1311] on rank 0; [17,23,57] on ranks 1,2")
    g = torch.ones(2, 6) if r == 1 else torch.ones(2, 3, 2)
    fails_everywhere(lambda: hvd.allgather(g, name="gshape"), "mismatched tensor shapes: [3,2] on ranks 0,2; [6] on rank 1")
    fails_everywhere(lambda: hvd.broadcast(torch.ones(4, 1 + r), 0, name="bshape"), "mismatched tensor shapes")
    # A 1-D tensor (whose call carries no shapes) is named by its shape too, not "unknown".
    v = torch.ones(3) if r == 0 else torch.ones(3, 2)
    fails_everywhere(lambda: hvd.allgather(v, name="g1shape"), "mismatched tensor shapes: [] on rank 0; [2] on ranks 1,2")
    # A 0-d tensor is not a [1] one (the same count): Horovod's shapes [] and [1] differ.
    scalar = torch.tensor(1.0) if r == 0 else torch.ones(1)
    fails_everywhere(lambda: hvd.allreduce(scalar, name="zshape"), "mismatched tensor shapes: [] on rank 0; [1] on ranks 1,2")
    fails_everywhere(lambda: hvd.broadcast(scalar, 0, name="zbshape"), "mismatched tensor shapes: [] on rank 0; [1] on ranks 1,2")
    assert hvd.allreduce(torch.tensor(1.0), op=hvd.Sum, name="zshape").item() == 3
    assert hvd.allreduce(torch.ones(17, 23, 57), op=hvd.Sum, name="shape")[0, 0, 0].item() == 3


@check
def the_table_and_each_sets_view():
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: [0, 1, 2], 1: [0], 2: [1, 2]}
    assert (single.process_set_id, pair.process_set_id) == (1, 2)
    assert hvd.global_process_set.ranks == [0, 1, 2] and hvd.global_process_set.size() == 3
    assert pair.included() == (r != 0) and single.included() == (r == 0)
    assert mine.size() == (1 if r == 0 else 2) and mine.rank() == (0 if r == 0 else r - 1)
    other = pair if r == 0 else single
    try:
        other.rank()
        raise AssertionError("rank() outside the set")
    except ValueError:
        pass


@check
def collectives_run_within_each_set_at_once():
    n = mine.size()
    s = hvd.allreduce(torch.full((5,), float(r + 1)), op=hvd.Sum, process_set=mine)
    assert s.tolist() == [float(sum(k + 1 for k in mine.ranks))] * 5, s
    a = hvd.allreduce(torch.full((2, 2), float(r)), process_set=mine)  # Average: over the set
    assert a[0, 0].item() == sum(mine.ranks) / n, a
    ia = hvd.allreduce(torch.full((3,), 10 * (r + 1), dtype=torch.int32), process_set=mine)
    assert ia.tolist() == [sum(10 * (k + 1) for k in mine.ranks) // n] * 3, ia
    g = hvd.allgather(torch.full((r + 1, 3), float(r)), process_set=mine)
    assert g[:, 0].tolist() == [float(k) for k in mine.ranks for _ in range(k + 1)], g
    b = hvd.broadcast(torch.full((3,), float(r)), root_rank=mine.ranks[-1], process_set=mine)
    assert b.tolist() == [float(mine.ranks[-1])] * 3, b
    rs = hvd.reducescatter(torch.ones(4, 2) * (r + 1), op=hvd.Sum, process_set=mine)
    assert rs.shape[0] == 4 // n and rs[0, 0].item() == sum(k + 1 for k in mine.ranks), rs
    out = hvd.alltoall(torch.arange(2 * n, dtype=torch.float32) + 100 * r, process_set=mine)
    assert out.numel() == 2 * n, out
    t = torch.ones(2 * n, 3, requires_grad=True)
    hvd.reducescatter(t, op=hvd.Sum, process_set=mine).backward(torch.ones(2, 3))
    assert t.grad.tolist() == [[float(n)] * 3] * (2 * n), t.grad  # Horovod's: the set's size times
    grp = hvd.grouped_allreduce([torch.ones(2), torch.ones(3, dtype=torch.float64)], op=hvd.Sum, process_set=mine)
    assert grp[0].tolist() == [n] * 2 and grp[1].tolist() == [n] * 3, grp
    hvd.barrier(process_set=mine)
    assert hvd.broadcast_object({"from": r}, root_rank=mine.ranks[0], process_set=mine) == {"from": mine.ranks[0]}
    assert hvd.allgather_object(r, process_set=mine) == mine.ranks


@check
def a_rank_outside_the_set_or_root_is_refused_at_once():
    other = pair if r == 0 else single
    for call in (lambda: hvd.allreduce(torch.ones(2), process_set=other),
                 lambda: hvd.barrier(process_set=other)):
        try:
            call()
            raise AssertionError("no error")
        except ValueError as e:
            assert "is not in process set" in str(e), e
    if r != 0:
        try:
            hvd.broadcast(torch.ones(2), root_rank=0, process_set=pair)
            raise AssertionError("no error")
        except ValueError as e:
            assert "root 0 is not in process set 2" in str(e), e


@check
def an_optimizer_averages_within_its_set():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), process_set=mine)
    model(torch.full((1, 2), float(r + 1))).sum().backward()
    opt.step()
    expect = -sum(k + 1 for k in mine.ranks) / mine.size()
    assert model.weight[0, 0].item() == expect, (model.weight, expect)


@check
def adding_and_removing_sets_follow_horovods_rules():
    if MODE == "static":
        try:
            hvd.add_process_set([0, 1])
            raise AssertionError("added without HOROVOD_DYNAMIC_PROCESS_SETS")
        except ValueError as e:
            assert "HOROVOD_DYNAMIC_PROCESS_SETS=1" in str(e), e
        return
    try:
        hvd.add_process_set([2, 1])
        raise AssertionError("a repeated set was added")
    except ValueError as e:
        assert "process set 2 has these ranks" in str(e), e
    assert hvd.remove_process_set(hvd.global_process_set) is False
    extra = hvd.add_process_set([0, 2])
    assert extra.process_set_id == 3
    if extra.included():
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=extra).item() == 2
    assert hvd.remove_process_set(extra) is True and extra.process_set_id is None
    assert hvd.remove_process_set(extra) is False
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: [0, 1, 2], 1: [0], 2: [1, 2]}


hvd.shutdown()
print(f"DONE {r}", flush=True)
