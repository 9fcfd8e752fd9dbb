"""The `horovod` shim of `hvdrun --horovod-compat`: horovod.torch is hvdrun.torch.

hvdrun puts this directory first on the workers' PYTHONPATH only when asked and only when
no real Horovod is importable, so `import horovod.torch as hvd` in an unchanged script runs
on hvdrun."""
try:
    from hvdrun import __version__  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("hvdrun --horovod-compat: the hvdrun Python package is not importable "
                      f"({e}); pip install hvdrun, or set PYTHONPATH to the directory that holds it") from e
