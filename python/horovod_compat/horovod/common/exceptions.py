"""horovod.common.exceptions, served by hvdrun.common.exceptions."""
from hvdrun.common.exceptions import HorovodInternalError, InvalidArgumentError, NotInitializedError  # noqa: F401
