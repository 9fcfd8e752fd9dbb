"""Exceptions, named as Horovod names them (horovod.common.exceptions)."""


class HorovodInternalError(RuntimeError):
    """A collective or runtime call failed: a peer died or did not answer in time, ranks
    called a collective with different arguments, or the runtime refused the call. The
    message is libhvdrun's, naming the rank and host involved where there is one; `code`
    is its HVD_ERR_* number (None when raised by Python code). In an elastic job
    hvd.elastic.run recovers from it: restores the last commit and joins the next round."""

    code = None


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic: the set of hosts changed (raised by State.commit()/check_host_updates() on
    every rank at the same call). hvd.elastic.run then joins the next round without
    restoring; skip_sync is True when hosts were only removed (the state need not move)."""

    def __init__(self, skip_sync: bool) -> None:
        super().__init__(f"the hosts of the elastic job changed (skip_sync={skip_sync})")
        self.skip_sync = skip_sync


class WorkerRemoved(SystemExit):
    """Elastic: hvd.init() found this worker's slot removed from the job (HVD_ERR_REMOVED).
    A SystemExit of status 0: the process ends quietly unless it catches it."""

    def __init__(self, message: str = "this worker's slot was removed from the elastic job") -> None:
        super().__init__(0)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotInitializedError(HorovodInternalError, ValueError):
    """A call that needs hvd.init() came before it (Horovod raises ValueError here)."""


class InvalidArgumentError(HorovodInternalError, ValueError):
    """A tensor or argument hvdrun cannot take: non-contiguous, an unsupported dtype, a
    CUDA tensor in a build without CUDA, a bad root rank or op, ..."""
