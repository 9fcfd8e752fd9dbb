"""Exceptions, named as Horovod names them (horovod.common.exceptions)."""


class HorovodInternalError(RuntimeError):
    """A collective or runtime call failed: a peer died or did not answer in time, ranks
    called a collective with different arguments, or the runtime refused the call. The
    message is libhvdrun's, naming the rank and host involved where there is one."""


class NotInitializedError(HorovodInternalError, ValueError):
    """A call that needs hvd.init() came before it (Horovod raises ValueError here)."""


class InvalidArgumentError(HorovodInternalError, ValueError):
    """A tensor or argument hvdrun cannot take: non-contiguous, an unsupported dtype, a
    CUDA tensor in a build without CUDA, a bad root rank or op, ..."""
