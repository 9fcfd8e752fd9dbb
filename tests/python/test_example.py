"""examples/pytorch_train.py under hvdrun, as it is and as `import horovod.torch as hvd`
under --horovod-compat; the flag never shadows a real Horovod."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import REPO, engine_missing, run_job

torch = pytest.importorskip("torch")
EXAMPLE = REPO / "examples" / "pytorch_train.py"
ARGS = ["--epochs", "2", "--samples", "1024", "--batch-size", "32", "--no-cuda"]


def results(out: str):
    """(loss per epoch, {rank: params checksum}, accuracy) from the example's output."""
    losses = [float(x) for x in re.findall(r"epoch \d+ loss ([0-9.]+)", out)]
    sums = {int(a): b for a, b in re.findall(r"rank (\d+): accuracy [0-9.]+ params (-?[0-9.]+)", out)}
    acc = [float(x) for x in re.findall(r"accuracy ([0-9.]+)", out)]
    return losses, sums, acc


@pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
def test_example_trains_on_two_ranks(tmp_path: Path) -> None:
    ckpt = tmp_path / "model.pt"
    j = run_job(2, [str(EXAMPLE), *ARGS, "--checkpoint", str(ckpt)], timeout=240)
    assert j.rc == 0, str(j)
    losses, sums, acc = results(j.out)
    assert len(losses) == 2 and losses[1] < losses[0], str(j)
    assert len(sums) == 2 and sums[0] == sums[1], f"ranks ended with different parameters\n{j}"
    assert min(acc) > 0.5, str(j)
    assert j.out.count("saved ") == 1 and "[0]<stdout>:saved" in j.out, str(j)  # rank 0 only
    state = torch.load(str(ckpt))
    assert set(state) == {"model", "optimizer", "epochs"} and state["model"]["fc1.weight"].shape == (256, 784)


def _horovod_copy(tmp_path: Path) -> Path:
    src = EXAMPLE.read_text()
    assert "import hvdrun.torch as hvd" in src
    p = tmp_path / "horovod_train.py"
    p.write_text(src.replace("import hvdrun.torch as hvd", "import horovod.torch as hvd"))
    return p


@pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
def test_horovod_script_runs_under_horovod_compat(tmp_path: Path) -> None:
    script = _horovod_copy(tmp_path)
    j = run_job(2, [str(script), *ARGS], timeout=240, hvdrun_args=["--horovod-compat"])
    assert j.rc == 0, str(j)
    losses, sums, _ = results(j.out)
    assert len(losses) == 2 and len(sums) == 2 and sums[0] == sums[1], str(j)
    # The same training as with hvdrun.torch: the same numbers.
    j2 = run_job(2, [str(EXAMPLE), *ARGS], timeout=240)
    assert results(j2.out)[1] == sums, f"{j}\n{j2}"


def test_without_the_flag_there_is_no_horovod(tmp_path: Path) -> None:
    j = run_job(1, ["-c", "import horovod"], timeout=60)
    assert j.rc != 0 and "No module named 'horovod'" in j.out + j.err, str(j)


def test_flag_does_not_shadow_a_real_horovod(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "horovod"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    pp = os.pathsep.join(p for p in (str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")) if p)
    j = run_job(1, ["-c", "import horovod; print('REAL', horovod.REAL)"], timeout=60,
                env={"PYTHONPATH": pp}, hvdrun_args=["--horovod-compat"])
    assert j.rc == 0 and "REAL True" in j.out, str(j)
    assert f"--horovod-compat: a real Horovod is importable ({fake / '__init__.py'})" in j.err, str(j)
