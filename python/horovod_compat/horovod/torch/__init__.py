"""horovod.torch, served by hvdrun.torch (see horovod/__init__.py)."""
import sys

import hvdrun.torch as _hvdrun_torch
from hvdrun.torch import compression as _compression, functions as _functions, mpi_ops as _mpi_ops
from hvdrun.torch import optimizer as _optimizer, sync_batch_norm as _sync_batch_norm
from hvdrun.torch import elastic as _elastic
from hvdrun.torch.elastic import sampler as _sampler, state as _state

for _name, _mod in (("mpi_ops", _mpi_ops), ("optimizer", _optimizer), ("functions", _functions),
                    ("compression", _compression), ("sync_batch_norm", _sync_batch_norm),
                    ("elastic", _elastic), ("elastic.state", _state), ("elastic.sampler", _sampler)):
    sys.modules[__name__ + "." + _name] = _mod
# `import horovod.torch as hvd` then binds hvdrun.torch itself.
sys.modules[__name__] = _hvdrun_torch
