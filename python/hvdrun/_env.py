"""The environment variables the hvdrun package reads, and the one place it reads them.

Each is in hvdrun's tunables table (common/tunables.cc, listed by `hvdrun --help-env`);
tests/python/test_env.py holds NAMES equal to the table's and finds no other read of the
environment in the package."""

from __future__ import annotations

import os

LIBRARY = "HVDRUN_LIBRARY"
HOROVOD_ELASTIC = "HOROVOD_ELASTIC"
NAMES = (LIBRARY, HOROVOD_ELASTIC)
# Written, never read here (hvd.init(process_sets="dynamic")): libhvdrun reads it, as
# HVDRUN_DYNAMIC_PROCESS_SETS's Horovod spelling.
HOROVOD_DYNAMIC_PROCESS_SETS = "HOROVOD_DYNAMIC_PROCESS_SETS"


def library() -> str:
    """HVDRUN_LIBRARY: the path of the libhvdrun.so to load; "" for the usual search."""
    return os.environ.get(LIBRARY, "")


def horovod_elastic() -> bool:
    """HOROVOD_ELASTIC, as Horovod reads it: exactly "1", looked up each time (an optimizer
    made after it is set registers its hooks even in a job of one rank)."""
    return os.environ.get(HOROVOD_ELASTIC) == "1"


def allow_dynamic_process_sets() -> None:
    """hvd.init(process_sets="dynamic"), as Horovod's: sets HOROVOD_DYNAMIC_PROCESS_SETS=1,
    which libhvdrun reads (its tunables table) when a set is added or removed."""
    os.environ[HOROVOD_DYNAMIC_PROCESS_SETS] = "1"
