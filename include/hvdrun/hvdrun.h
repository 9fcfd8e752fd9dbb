/* libhvdrun: the worker runtime of hvdrun. C API, usable from C and C++.
 *
 * Every function returns 0 (HVD_SUCCESS) on success or one of the HVD_ERR_* codes below;
 * hvd_last_error() then says what happened (per thread), naming the peer rank and host
 * where one is involved. Start the program under `hvdrun`; without hvdrun's environment
 * hvd_init() starts a job of size 1. */
#ifndef HVDRUN_HVDRUN_H_
#define HVDRUN_HVDRUN_H_

#include <stddef.h>

#if defined(__GNUC__)
#define HVD_API __attribute__((visibility("default")))
#else
#define HVD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_SUCCESS 0
#define HVD_ERR_NOT_INITIALIZED 1  /* call hvd_init() first */
#define HVD_ERR_INVALID_ARGUMENT 2 /* a bad dtype, op, root, pointer, count, or average of integers */
#define HVD_ERR_RENDEZVOUS 3       /* cannot reach or use hvdrun's rendezvous */
#define HVD_ERR_AUTH 4             /* authentication failed (wrong job secret) */
#define HVD_ERR_TIMEOUT 5          /* a peer or the rendezvous did not answer in time */
#define HVD_ERR_PEER 6             /* a peer died or its connection dropped */
#define HVD_ERR_MISMATCH 7         /* ranks called a collective with different arguments */
#define HVD_ERR_UNSUPPORTED 8      /* not available in this build */
#define HVD_ERR_INTERNAL 9         /* a broken invariant inside libhvdrun */
#define HVD_ERR_CUDA 10            /* a CUDA runtime error */
#define HVD_ERR_NCCL 11            /* an NCCL error */
#define HVD_ERR_RESET 12   /* elastic: the job is being reset (a peer was lost or the
                              hosts changed): every pending and later collective of
                              this round fails with it, at once (hvdrun's rendezvous
                              tells every worker); a peer's closed connection in an
                              elastic job is this code too, not HVD_ERR_PEER;
                              hvd_shutdown() (which frees the round's handles), then
                              hvd_init(), which joins the next round with its new rank
                              and size (or returns it again if that round is reset too) */
#define HVD_ERR_REMOVED 13 /* elastic: hvd_init(): this worker's slot was removed from
                              the job; the process should exit (status 0) */

typedef enum hvd_dtype {
  HVD_INT8 = 0,
  HVD_UINT8 = 1,
  HVD_INT32 = 2,
  HVD_INT64 = 3,
  HVD_FLOAT16 = 4,
  HVD_BFLOAT16 = 5,
  HVD_FLOAT32 = 6,
  HVD_FLOAT64 = 7,
  HVD_INT16 = 8,
  /* One byte, 0 or 1 (C's and torch's bool): sum and max are a logical or, product and min
   * a logical and (as Horovod's Gloo build reduces bools). */
  HVD_BOOL = 9,
  /* Not a dtype: gives the enum the range of int, so that a bad value a caller passes is
   * well-defined to check (and refused) on the C++ side of this API. */
  hvd_dtype_int_range_ = -2147483647 - 1
} hvd_dtype_t;

/* Integer sums and products wrap around on overflow (two's complement), as MPI's and NCCL's do. */
typedef enum hvd_op {
  HVD_OP_SUM = 0,
  HVD_OP_AVERAGE = 1,
  HVD_OP_MIN = 2,
  HVD_OP_MAX = 3,
  HVD_OP_PRODUCT = 4,
  hvd_op_int_range_ = -2147483647 - 1 /* not an op: the range of int, as for hvd_dtype_t */
} hvd_op_t;

/* Connects to hvdrun's rendezvous, authenticates, registers and returns when every rank of
 * the job has registered. Calling it again after success is harmless; after hvd_shutdown
 * it starts again (every rank must call it again). */
HVD_API int hvd_init(void);
HVD_API int hvd_shutdown(void);
HVD_API int hvd_initialized(void); /* 1 or 0 */

#define HVD_HOSTS_ADDED 1
#define HVD_HOSTS_REMOVED 2
/* Elastic: the newest membership change this worker has been told of (by the
 * rendezvous, over the connection it holds): *seq = its number (0 = none since the
 * job started; numbers only grow, and are the same on every worker for the same
 * change), *kinds = HVD_HOSTS_ADDED | HVD_HOSTS_REMOVED bits of every change after the
 * one this round was formed at. Never blocks; outside an elastic job *seq = 0, *kinds = 0.
 * A null pointer: HVD_ERR_INVALID_ARGUMENT. */
HVD_API int hvd_elastic_updates(long long* seq, int* kinds);
HVD_API int hvd_elastic(void); /* 1 in an elastic job (hvdrun --min-np/--max-np/...), else 0 */
/* Tells hvdrun which commit of the program's state this round starts from (hvd.elastic.run's
 * rank 0 calls it once per round, after the state's sync): hvdrun's line for the reset that
 * made the round names it ("restored commit 17"). Outside an elastic job: HVD_SUCCESS, and
 * nothing is sent. Before hvd_init: HVD_ERR_NOT_INITIALIZED; commit < 0: HVD_ERR_INVALID_ARGUMENT. */
HVD_API int hvd_elastic_commit(long long commit);

/* fork(): a child of the process that called hvd_init (a DataLoader worker, a
 * multiprocessing child) inherits the rank but not the runtime's threads, and the job's
 * connections stay the parent's. There, as in Horovod, hvd_initialized() and the rank and
 * size queries answer the parent's values; every collective, hvd_wait and the like return
 * HVD_ERR_NOT_INITIALIZED (hvd_poll -1) naming the parent; hvd_init fails the same way (a
 * forked child has no rank of its own); hvd_shutdown sends and closes nothing and only
 * makes this process forget the runtime (hvd_initialized() 0 after it). The parent's job
 * goes on unharmed. */

/* -1 before hvd_init(). They never wait for a running collective. */
HVD_API int hvd_rank(void);
HVD_API int hvd_size(void);
HVD_API int hvd_local_rank(void);
HVD_API int hvd_local_size(void);
HVD_API int hvd_cross_rank(void);
HVD_API int hvd_cross_size(void);

HVD_API int hvd_barrier(void);

/* Collectives: blocking (submit + wait on the engine below, so ranks must call them in the
 * same order); in place when sendbuf == recvbuf; count == 0 is allowed. They are unnamed:
 * the k-th blocking call of a kind (allreduce, broadcast, allgather, barrier, and each of
 * the blocking wrappers below) in a process pairs with the k-th of that kind on every other
 * rank. Calls of one kind from several threads therefore run one at a time, in the order
 * they reach libhvdrun (first come, first served; calls of different kinds do not wait for
 * each other), and pair in that order: threads whose calls must pair with their own
 * counterparts, whatever the threads' timing, use the named async calls.
 *
 * Checked before anything is sent, by every call below (blocking or not), each failure
 * HVD_ERR_INVALID_ARGUMENT with the value and the most that fits in hvd_last_error():
 * every buffer's bytes (count x the dtype's size; rows x row_elems x the size) must end
 * below the top of the address space, and so must size() times what this rank sends to
 * every rank (the output of an allgather, what an alltoall may deliver); alltoall splits
 * must add up to rows without wrapping. A recvbuf that overlaps its sendbuf other than at
 * the same address (in place), or another tensor's buffers in a group, is refused; an
 * allgather's sendbuf may also be this rank's block of recvbuf.
 *
 * Device memory (libhvdrun built with CUDA and NCCL): buffers in CUDA device or managed
 * memory go through NCCL, one communicator per process on the device of the local rank
 * (HVDRUN_CUDA_DEVICE overrides), made at the first such call (or in hvd_init with
 * HVDRUN_NCCL_EAGER=1) with its unique id relayed by hvdrun. A call is ordered after work
 * already queued on the default stream, runs on a stream the runtime owns, and returns when
 * the result is in the buffer; synchronise work on other streams before the call. Both
 * buffers of a call must be on the same side. Built with CUDA but without NCCL, device
 * buffers are copied through host memory to the CPU ring. CUDA and NCCL failures return
 * HVD_ERR_CUDA and HVD_ERR_NCCL with their text. */
HVD_API int hvd_allreduce(const void* sendbuf, void* recvbuf, size_t count, hvd_dtype_t dtype, hvd_op_t op);
HVD_API int hvd_broadcast(void* buf, size_t count, hvd_dtype_t dtype, int root);
/* recvbuf holds size * sendcount elements, rank r's at offset r * sendcount. */
HVD_API int hvd_allgather(const void* sendbuf, void* recvbuf, size_t sendcount, hvd_dtype_t dtype);

/* ---- Asynchronous named collectives (the engine) ----
 *
 * One background thread per process runs every collective, the blocking calls above
 * included (they are submit + wait, paired by the order of the calls). A named request
 * matches the request of the same name on every other rank, whatever the order in which
 * ranks submit them; an operation runs when every rank that has not joined submitted it,
 * in the same order on every rank. Each rank's request is checked against the others'
 * (operation, dtype, counts or shapes, reduction op, root, scales, host/device memory): a
 * mismatch fails the operation on every rank with HVD_ERR_MISMATCH and a message naming
 * the tensor, the ranks and their values. A name already pending on this rank (an
 * asynchronous request's name stays taken until its handle is waited for, finished or not,
 * so that the decision does not depend on timing) is HVD_ERR_INVALID_ARGUMENT at once, and the same decision reaches every rank: the k-th
 * submission of a name pairs with the k-th on every rank, so the request each other rank
 * pairs with the refused one fails too (HVD_ERR_INVALID_ARGUMENT, naming the rank that
 * refused it), whether or not it overlapped with an earlier one there. A peer that dies or calls hvd_shutdown fails every
 * pending handle on every rank (HVD_ERR_PEER); hvd_shutdown fails this rank's pending
 * handles. Buffers must stay valid and untouched until the handle finished.
 *
 * Tunables (environment, also Horovod's HOROVOD_* spelling): HVDRUN_FUSION_THRESHOLD
 * (bytes; consecutive ready allreduces of one dtype and reduction share one transfer
 * through a buffer this large; 0 disables fusion), HVDRUN_CYCLE_TIME (ms; how often a rank
 * with requests pending on other ranks looks again without being woken; a request on an
 * idle engine starts at once), HVDRUN_CACHE_CAPACITY (agreed responses kept, so that a
 * repeated name costs one bit; 0 disables), HVDRUN_STALL_CHECK_TIME_SECONDS,
 * HVDRUN_STALL_SHUTDOWN_TIME_SECONDS, HVDRUN_TIMELINE. See hvdrun(1). */
typedef long long hvd_handle_t; /* > 0 */

/* Returns at once; *handle identifies the operation. prescale/postscale multiply the data
 * before/after the reduction (1.0 = none; floating dtypes only). HVD_OP_AVERAGE divides by
 * hvd_size(). */
HVD_API int hvd_allreduce_async(const char* name, const void* sendbuf, void* recvbuf, size_t count,
                                hvd_dtype_t dtype, hvd_op_t op, double prescale, double postscale,
                                hvd_handle_t* handle);
HVD_API int hvd_broadcast_async(const char* name, void* buf, size_t count, hvd_dtype_t dtype, int root,
                                hvd_handle_t* handle);
HVD_API int hvd_poll(hvd_handle_t handle); /* 1 finished, 0 pending, -1 unknown handle */
/* Blocks until finished; returns the operation's status (hvd_last_error() on this thread
 * then says why it failed); releases the handle. */
HVD_API int hvd_wait(hvd_handle_t handle);
/* Join (Horovod's semantics): a rank out of data calls hvd_join; until every rank has
 * joined, the other ranks' allreduces complete with each joined rank contributing zeros,
 * and HVD_OP_AVERAGE still divides by hvd_size(), the number of all ranks, joined or not
 * (as Horovod 0.28.1 does: its average is a sum scaled by 1/size). Broadcast, allgather,
 * alltoall and reducescatter fail with HVD_ERR_INVALID_ARGUMENT while a rank has joined.
 * Returns when every rank has joined, with *last_joined_rank the rank that joined last
 * (when several joined in the same cycle, the highest of them). */
HVD_API int hvd_join(int* last_joined_rank);

/* Grouped allreduce: n tensors of one dtype/op/scales, negotiated and completed together
 * under one name. */
HVD_API int hvd_grouped_allreduce_async(const char* name, int n, const void* const* sendbufs,
                                        void* const* recvbufs, const size_t* counts, hvd_dtype_t dtype,
                                        hvd_op_t op, double prescale, double postscale, hvd_handle_t* handle);
/* The same with each tensor's dtype (dtypes[n]; the reduction op and scales must suit every
 * one). Every rank's list must match tensor by tensor: a mismatch fails the whole group on
 * every rank at once (HVD_ERR_MISMATCH) naming the ranks and their dtypes. A group of
 * several dtypes is neither fused with other tensors nor sent with the negotiation: each
 * tensor is reduced on its own. */
HVD_API int hvd_grouped_allreduce_dtypes_async(const char* name, int n, const void* const* sendbufs,
                                               void* const* recvbufs, const size_t* counts,
                                               const hvd_dtype_t* dtypes, hvd_op_t op, double prescale,
                                               double postscale, hvd_handle_t* handle);

/* Allgather with a per-rank first dimension: this rank sends `rows` rows of `row_elems`
 * elements (row_elems equal on every rank, rows may differ; a mismatch of row_elems is
 * HVD_ERR_MISMATCH). The output (all ranks' rows, by rank) is kept by the handle. */
HVD_API int hvd_allgatherv_async(const char* name, const void* sendbuf, size_t rows, size_t row_elems,
                                 hvd_dtype_t dtype, hvd_handle_t* handle);

/* Alltoall with splits: sendbuf holds `rows` rows of `row_elems` elements, in size()
 * consecutive blocks; block r (splits[r] rows) goes to rank r. splits == NULL: equal
 * blocks (rows % size() == 0, else HVD_ERR_INVALID_ARGUMENT). The output (the rows each
 * rank sent to this one, by rank) is kept by the handle. */
HVD_API int hvd_alltoall_async(const char* name, const void* sendbuf, size_t rows, size_t row_elems,
                               const size_t* splits, hvd_dtype_t dtype, hvd_handle_t* handle);

/* Reducescatter (Horovod's): the `rows` rows are reduced across ranks and split by first
 * dimension, rank r receiving rows/size() rows plus one more when r < rows % size().
 * recvbuf holds this rank's share. */
HVD_API int hvd_reducescatter_async(const char* name, const void* sendbuf, void* recvbuf, size_t rows,
                                    size_t row_elems, hvd_dtype_t dtype, hvd_op_t op, hvd_handle_t* handle);

/* For outputs whose size the other ranks decide (allgatherv, alltoall): blocks until the
 * operation finished, then fills rows_per_rank[size()] with the rows received from each
 * rank; returns the operation's status. The handle stays valid. */
HVD_API int hvd_result_rows(hvd_handle_t handle, size_t* rows_per_rank);
/* Blocks until finished, copies the kept output (sum(rows_per_rank) * row_elems elements,
 * by rank) to recvbuf (same memory kind as the inputs), releases the handle; returns the
 * operation's status. For handles without kept output it is hvd_wait (recvbuf ignored). */
HVD_API int hvd_wait_result(hvd_handle_t handle, void* recvbuf);

/* Blocking wrappers (unnamed: ranks must call them in the same order, as with the
 * existing blocking calls). Outputs of allgatherv/alltoall are allocated by libhvdrun
 * (host memory, malloc) and released with hvd_free; rows_per_rank has size() entries. */
HVD_API int hvd_grouped_allreduce(int n, const void* const* sendbufs, void* const* recvbufs, const size_t* counts,
                                  hvd_dtype_t dtype, hvd_op_t op);
HVD_API int hvd_allgatherv(const void* sendbuf, size_t rows, size_t row_elems, hvd_dtype_t dtype, void** recvbuf,
                           size_t* rows_per_rank);
HVD_API int hvd_alltoall(const void* sendbuf, size_t rows, size_t row_elems, const size_t* splits,
                         hvd_dtype_t dtype, void** recvbuf, size_t* rows_per_rank);
HVD_API int hvd_reducescatter(const void* sendbuf, void* recvbuf, size_t rows, size_t row_elems, hvd_dtype_t dtype,
                              hvd_op_t op);
HVD_API void hvd_free(void* p);

/* ---- Shapes and process sets ----
 *
 * hvd_next_call describes the next collective this thread submits (any call above, blocking
 * or asynchronous, but hvd_join); that call takes the description whether it succeeds or
 * not, and later calls have none.
 *  - process_set: the set it runs in (0: every rank of the job; else an id from
 *    hvd_add_process_set). Only the set's ranks call it (another rank's call is
 *    HVD_ERR_INVALID_ARGUMENT); a broadcast's root is still a rank of the job, and must be
 *    in the set; HVD_OP_AVERAGE divides by the set's size; the per-rank arrays of alltoall
 *    (splits) and of hvd_result_rows have the set's size.
 *  - the shapes of its ntensors tensors (0: none given): tensor i has ndims[i] (0..32)
 *    dimensions, all of them in dims, one tensor after another. They must hold the call's
 *    counts (allreduce, broadcast: the dimensions multiply to the count; allgatherv,
 *    alltoall, reducescatter: the first is the rows, the others multiply to row_elems),
 *    else HVD_ERR_INVALID_ARGUMENT. Ranks then agree on shapes, not only on counts, as
 *    Horovod's do: a [17, 1311] tensor on one rank and [17, 23, 57] on another (or, for
 *    allgatherv and alltoall, any dimension but the first that differs) fail on every rank
 *    with HVD_ERR_MISMATCH naming the shapes and ranks. A call without shapes is compared
 *    with the others by counts as before. */
HVD_API int hvd_next_call(int process_set, int ntensors, const int* ndims, const long long* dims);

/* Process sets (Horovod's): subsets of the job's ranks whose collectives run among
 * themselves, each over its own ring and engine, concurrently with the other sets'. Every
 * rank of the job (members or not) adds and removes sets by the same calls in the same
 * order; ids count up from 1 (0 is the whole job). hvd_add_process_set takes `n` ranks (any
 * order, none twice) and gives the set's id in *id; after hvd_init it needs
 * HOROVOD_DYNAMIC_PROCESS_SETS=1 (or HVDRUN_DYNAMIC_PROCESS_SETS=1), as does
 * hvd_remove_process_set, else HVD_ERR_INVALID_ARGUMENT; so is a set whose ranks an existing
 * set has (the whole job included). hvd_init_process_sets, called by every rank right after
 * hvd_init, adds `nsets` sets whose ranks lie one after another in `ranks` (sizes[i] each)
 * without that variable; a set that exists already is skipped there. Removing set 0 or an
 * unknown id is HVD_ERR_INVALID_ARGUMENT; removal fails the set's pending operations.
 * hvd_shutdown removes every set. */
HVD_API int hvd_add_process_set(const int* ranks, int n, int* id);
HVD_API int hvd_init_process_sets(const int* ranks, const int* sizes, int nsets);
HVD_API int hvd_remove_process_set(int id);
/* Set `id`: *rank this rank's place in it (-1: not a member), *size its number of ranks,
 * and (when ranks is not null) its ranks, ascending, in ranks[*size]. */
HVD_API int hvd_process_set_info(int id, int* rank, int* size, int* ranks);
/* The ids of the sets that exist, 0 first: *count of them, at most `capacity` written. */
HVD_API int hvd_process_set_ids(int* ids, int capacity, int* count);

/* What this build has. */
HVD_API int hvd_nccl_built(void);      /* 1 or 0 */
HVD_API int hvd_cuda_built(void);      /* 1 or 0 */
HVD_API int hvd_nccl_version(void);    /* NCCL_VERSION_CODE built against (21803: 2.18.3); 0 without NCCL */
HVD_API const char* hvd_version(void); /* hvdrun's version, e.g. "0.1.0" */

/* What the last failed call on this thread did wrong; "" when none. */
HVD_API const char* hvd_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HVDRUN_HVDRUN_H_ */
