"""Issue 25.6: the numbers _capi.py uses for errors, dtypes and reductions are those of
include/hvdrun/hvdrun.h (they are copied by hand: this test holds the copies equal)."""
from __future__ import annotations

import re
from typing import Dict

from conftest import REPO

HEADER = REPO / "include" / "hvdrun" / "hvdrun.h"
# Issue 28: the elastic codes agreed between the Python and the runtime sides (the runtime's
# header gets them in its own branch). Until the header has them they count as its; once it
# has them, its numbers are the ones checked.
ELASTIC_CONTRACT = {"HVD_ERR_RESET": 12, "HVD_ERR_REMOVED": 13, "HVD_HOSTS_ADDED": 1, "HVD_HOSTS_REMOVED": 2}


def header_constants() -> Dict[str, int]:
    """HVD_* -> value: the #defines and the members of every typedef enum."""
    text = HEADER.read_text()
    out = {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define (HVD_\w+) (\d+)\b", text, re.M)}
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, re.S):
        for m in re.finditer(r"(HVD_\w+)\s*=\s*(\d+)", body):
            out[m.group(1)] = int(m.group(2))
    return {**ELASTIC_CONTRACT, **out}


def python_name(c_name: str) -> str:
    """HVD_ERR_PEER -> ERR_PEER, HVD_FLOAT32 -> FLOAT32, HVD_OP_SUM -> OP_SUM."""
    return c_name[len("HVD_"):]


def test_header_is_read() -> None:
    c = header_constants()
    assert c["HVD_SUCCESS"] == 0 and c["HVD_ERR_NCCL"] > 0 and c["HVD_FLOAT64"] > 0 and "HVD_OP_PRODUCT" in c, c


def test_every_error_dtype_and_op_of_the_header_has_its_number_in_capi() -> None:
    from hvdrun import _capi
    c = header_constants()
    for name, value in c.items():
        assert getattr(_capi, python_name(name), None) == value, f"{name} = {value} in hvdrun.h, " \
            f"_capi.{python_name(name)} = {getattr(_capi, python_name(name), None)}"


def test_capi_has_no_number_the_header_lacks() -> None:
    from hvdrun import _capi
    c = header_constants()
    ours = [n for n in vars(_capi) if re.fullmatch(r"(SUCCESS|ERR_[A-Z_]+|OP_[A-Z]+|U?INT\d+|B?FLOAT\d+|BOOL)", n)]
    assert ours, "no constants found in _capi"
    for n in ours:
        assert "HVD_" + n in c, f"_capi.{n} has no HVD_{n} in hvdrun.h"


def test_error_names_and_dtype_tables_cover_the_header() -> None:
    from hvdrun import _capi
    c = header_constants()
    errors = {v: n for n, v in c.items() if n.startswith("HVD_ERR_")}
    assert _capi._ERR_NAMES == errors
    dtypes = {v for n, v in c.items() if re.fullmatch(r"HVD_((U?INT|B?FLOAT)\d+|BOOL)", n)}
    assert set(_capi.DTYPE_NAMES) == dtypes and set(_capi.DTYPE_SIZES) == dtypes
