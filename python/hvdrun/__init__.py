"""hvdrun: Horovod's Python API on libhvdrun.

`import hvdrun.torch as hvd` is Horovod's PyTorch API; `import hvdrun.numpy as hvd` offers
the same process calls and blocking collectives on NumPy arrays. Both bind libhvdrun's C
API through ctypes (hvdrun/_capi.py), so nothing is compiled against torch.
"""

from hvdrun._version import __version__
from hvdrun.common.exceptions import HorovodInternalError, InvalidArgumentError, NotInitializedError

__all__ = ["__version__", "HorovodInternalError", "InvalidArgumentError", "NotInitializedError"]
