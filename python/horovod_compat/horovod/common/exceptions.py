"""horovod.common.exceptions, served by hvdrun.common.exceptions."""
from hvdrun.common.exceptions import (HorovodInternalError, HostsUpdatedInterrupt, InvalidArgumentError,  # noqa: F401
                                      NotInitializedError)
