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
#define HVD_ERR_INVALID_ARGUMENT 2 /* a bad dtype, op, root, pointer, or average of integers */
#define HVD_ERR_RENDEZVOUS 3       /* cannot reach or use hvdrun's rendezvous */
#define HVD_ERR_AUTH 4             /* authentication failed (wrong job secret) */
#define HVD_ERR_TIMEOUT 5          /* a peer or the rendezvous did not answer in time */
#define HVD_ERR_PEER 6             /* a peer died or its connection dropped */
#define HVD_ERR_MISMATCH 7         /* ranks called a collective with different arguments */
#define HVD_ERR_UNSUPPORTED 8      /* not available in this build */
#define HVD_ERR_INTERNAL 9         /* a broken invariant inside libhvdrun */
#define HVD_ERR_CUDA 10            /* a CUDA runtime error */
#define HVD_ERR_NCCL 11            /* an NCCL error */

typedef enum hvd_dtype {
  HVD_INT8 = 0,
  HVD_UINT8 = 1,
  HVD_INT32 = 2,
  HVD_INT64 = 3,
  HVD_FLOAT16 = 4,
  HVD_BFLOAT16 = 5,
  HVD_FLOAT32 = 6,
  HVD_FLOAT64 = 7
} hvd_dtype_t;

typedef enum hvd_op { HVD_OP_SUM = 0, HVD_OP_AVERAGE = 1, HVD_OP_MIN = 2, HVD_OP_MAX = 3, HVD_OP_PRODUCT = 4 } hvd_op_t;

/* Connects to hvdrun's rendezvous, authenticates, registers and returns when every rank of
 * the job has registered. Calling it again after success is harmless. */
HVD_API int hvd_init(void);
HVD_API int hvd_shutdown(void);
HVD_API int hvd_initialized(void); /* 1 or 0 */

/* -1 before hvd_init(). */
HVD_API int hvd_rank(void);
HVD_API int hvd_size(void);
HVD_API int hvd_local_rank(void);
HVD_API int hvd_local_size(void);
HVD_API int hvd_cross_rank(void);
HVD_API int hvd_cross_size(void);

HVD_API int hvd_barrier(void);

/* Collectives: blocking; in place when sendbuf == recvbuf; count == 0 is allowed.
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

/* What the last failed call on this thread did wrong; "" when none. */
HVD_API const char* hvd_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HVDRUN_HVDRUN_H_ */
