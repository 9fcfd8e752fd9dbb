"""horovod.common.elastic, served by hvdrun.common.elastic (State, ObjectState, run_fn)."""
import sys

import hvdrun.common.elastic as _elastic

sys.modules[__name__] = _elastic
