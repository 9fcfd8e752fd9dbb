"""Runs named checks in a worker and prints one 'CHECK <name> OK|FAIL <why>' line each."""
from __future__ import annotations

import traceback
from typing import Callable, List, Optional

_selected: Optional[List[str]] = None


def select(names: Optional[List[str]]) -> None:
    global _selected
    _selected = names or None


def check(fn: Callable[[], None]) -> Callable[[], None]:
    name = fn.__name__
    if _selected is not None and name not in _selected:
        return fn
    try:
        fn()
        print(f"CHECK {name} OK", flush=True)
    except Exception as e:  # the verdict names what went wrong
        tb = traceback.format_exc().strip().splitlines()
        where = tb[-3].strip() if len(tb) >= 3 else ""
        print(f"CHECK {name} FAIL {type(e).__name__}: {e} [{where}]".replace("\n", " "), flush=True)
    return fn
