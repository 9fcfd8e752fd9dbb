"""Issue 25.6: the package reads the environment in one place (hvdrun/_env.py), and only
variables of hvdrun's tunables table (common/tunables.cc, `hvdrun --help-env`)."""
from __future__ import annotations

import re

import pytest

from conftest import REPO, run_python

PACKAGE = REPO / "python" / "hvdrun"


def table_names() -> set:
    text = (REPO / "common" / "tunables.cc").read_text()
    return set(re.findall(r'^\s+\{"([A-Z0-9_]+)", "', text, re.M))


def test_no_module_but_env_reads_the_environment() -> None:
    readers = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "_env.py" and re.search(r"\bos\.(environ|getenv)\b|\bgetenv\(", p.read_text())]
    assert readers == [], f"read the environment outside hvdrun/_env.py: {readers}"


def test_every_variable_the_package_reads_is_in_the_tunables_table() -> None:
    from hvdrun import _env
    names = table_names()
    assert len(names) > 40, names  # the table was read
    assert set(_env.NAMES) <= names, set(_env.NAMES) - names


@pytest.mark.parametrize("value,hooks", [(None, False), ("1", True), ("0", False), ("true", False)])
def test_horovod_elastic_registers_the_hooks_in_a_job_of_one_as_horovod(torch_available: bool, value, hooks) -> None:
    if not torch_available:
        pytest.skip("torch not importable")
    code = """
import torch
import hvdrun.torch as hvd
hvd.init()
model = torch.nn.Linear(2, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
print("HOOKS", len(opt._grad_accs))
"""
    env = {"HOROVOD_ELASTIC": value} if value is not None else {}
    p = run_python(code, env=env)
    assert p.returncode == 0, p.stderr
    assert f"HOOKS {2 if hooks else 0}" in p.stdout, p.stdout + p.stderr
