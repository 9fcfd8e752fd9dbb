"""hvdrun.torch: Horovod's PyTorch API (`import hvdrun.torch as hvd`) on libhvdrun.

Works with any torch from 1.13 on: tensors reach libhvdrun by data pointer through its C
API (hvdrun/_capi.py), so nothing here is compiled against torch."""

from hvdrun._version import __version__
from hvdrun.common.exceptions import HorovodInternalError, InvalidArgumentError, NotInitializedError
from hvdrun.torch.compression import Compression
from hvdrun.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                    broadcast_parameters)
from hvdrun.torch.mpi_ops import (Average, Max, Min, Product, ProcessSet, Sum, add_process_set, allgather, allgather_async,
                                  allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                                  alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                                  broadcast_async_, cross_rank, cross_size, cuda_built, global_process_set,
                                  gloo_built, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                  grouped_allreduce_async_, init, is_homogeneous, is_initialized, join,
                                  local_rank, local_size, mpi_built, mpi_threads_supported, nccl_built, poll,
                                  rank, reducescatter, reducescatter_async, remove_process_set, shutdown, size,
                                  synchronize)
from hvdrun.torch.mpi_ops import Adasum, ccl_built, ddl_built, gloo_enabled, mpi_enabled, rocm_built
from hvdrun.torch.grouped_ops import (grouped_allgather, grouped_allgather_async, grouped_reducescatter,
                                      grouped_reducescatter_async)
from hvdrun.torch.sparse_ops import sparse_allreduce_async
from hvdrun.torch.optimizer import DistributedOptimizer
from hvdrun.torch.sync_batch_norm import SyncBatchNorm
from hvdrun.torch import elastic  # noqa: E402  (hvd.elastic.run, as horovod.torch has it)

__all__ = [
    "__version__", "HorovodInternalError", "InvalidArgumentError", "NotInitializedError", "Compression",
    "allgather_object", "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters",
    "Average", "Max", "Min", "Product", "Sum", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
    "allgather", "allgather_async", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "reducescatter", "reducescatter_async", "join", "poll", "synchronize",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
    "is_homogeneous", "nccl_built", "cuda_built", "mpi_built", "gloo_built", "mpi_threads_supported",
    "DistributedOptimizer", "SyncBatchNorm", "elastic",
    "Adasum", "ccl_built", "ddl_built", "gloo_enabled", "mpi_enabled", "rocm_built",
    "grouped_allgather", "grouped_allgather_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async",
]
