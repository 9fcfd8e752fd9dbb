"""Issue 29 ("collective speed unchanged"): _capi.next_call builds the ctypes arrays of a
call's shapes once per distinct description and reuses them; the table of descriptions is
bounded, and a reused description still describes its own shapes."""
from __future__ import annotations

import ctypes

import pytest

from conftest import engine_missing

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))


def described(args) -> tuple:
    """(process set, [shape, ...]) as the arguments of hvd_next_call say it."""
    ps, n, ndims, dims = args
    shapes, at = [], 0
    for k in range(n):
        shapes.append(tuple(dims[at:at + ndims[k]]))
        at += ndims[k]
    return ps, shapes


def test_a_description_is_built_once_and_describes_its_shapes() -> None:
    from hvdrun import _capi
    try:
        _capi.next_call(0, [(3, 5)])
        first = _capi._call_shapes[(0, (3, 5))]
        _capi.next_call(0, [[3, 5]])  # a list is the same description as a tuple or a torch.Size
        assert _capi._call_shapes[(0, (3, 5))] is first
        _capi.next_call(2, [(4,), (), (1, 2, 3)])
        assert described(_capi._call_shapes[(2, (4,), (), (1, 2, 3))]) == (2, [(4,), (), (1, 2, 3)])
        assert described(first) == (0, [(3, 5)])
        assert isinstance(first[2], ctypes.Array) and isinstance(first[3], ctypes.Array)
    finally:
        _capi._fn("hvd_next_call")(0, 0, None, None)  # no description left for a later call


def test_the_table_of_descriptions_is_bounded() -> None:
    from hvdrun import _capi
    try:
        for i in range(_capi._CALL_SHAPES_KEPT + 10):
            _capi.next_call(0, [(i, 2)])
            assert len(_capi._call_shapes) <= _capi._CALL_SHAPES_KEPT
        last = _capi._CALL_SHAPES_KEPT + 9
        assert described(_capi._call_shapes[(0, (last, 2))]) == (0, [(last, 2)])
    finally:
        _capi._fn("hvd_next_call")(0, 0, None, None)
