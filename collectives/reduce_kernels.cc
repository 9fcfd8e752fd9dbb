#include "collectives/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/dtype.h"

namespace hvdrun {
namespace {

// always_inline: each SIMD clone below compiles its own copy of the loops.
#define HVDRUN_INLINE inline __attribute__((always_inline))

// Sums and products of int32/int64 wrap around (as MPI's and NCCL's do) rather than being
// undefined behaviour: computed in the unsigned type of the same width (the same
// instructions). Narrower types are promoted to int and cannot overflow there. A bool's sum
// is a logical or, its product a logical and.
template <class T>
HVDRUN_INLINE T add(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int)) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);
  }
}
template <class T>
HVDRUN_INLINE T mul(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int)) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<T>(a * b);
  }
}

template <class T>
HVDRUN_INLINE void apply(T* __restrict d, const T* __restrict s, size_t n, hvd_op_t op) {
  switch (op) {
    case hvd_op_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_OP_SUM:
    case HVD_OP_AVERAGE:
      for (size_t i = 0; i < n; ++i) d[i] = add(d[i], s[i]);
      break;
    case HVD_OP_PRODUCT:
      for (size_t i = 0; i < n; ++i) d[i] = mul(d[i], s[i]);
      break;
    case HVD_OP_MIN:
      for (size_t i = 0; i < n; ++i) d[i] = s[i] < d[i] ? s[i] : d[i];
      break;
    case HVD_OP_MAX:
      for (size_t i = 0; i < n; ++i) d[i] = s[i] > d[i] ? s[i] : d[i];
      break;
  }
}

// d[i] = op(a[i], b[i]), the same expression as apply() with d = a, s = b.
template <class T>
HVDRUN_INLINE void apply3(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n, hvd_op_t op) {
  switch (op) {
    case hvd_op_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_OP_SUM:
    case HVD_OP_AVERAGE:
      for (size_t i = 0; i < n; ++i) d[i] = add(a[i], b[i]);
      break;
    case HVD_OP_PRODUCT:
      for (size_t i = 0; i < n; ++i) d[i] = mul(a[i], b[i]);
      break;
    case HVD_OP_MIN:
      for (size_t i = 0; i < n; ++i) d[i] = b[i] < a[i] ? b[i] : a[i];
      break;
    case HVD_OP_MAX:
      for (size_t i = 0; i < n; ++i) d[i] = b[i] > a[i] ? b[i] : a[i];
      break;
  }
}

template <class T>
HVDRUN_INLINE void apply3_as(void* d, const void* a, const void* b, size_t n, hvd_op_t op) {
  apply3(static_cast<T*>(d), static_cast<const T*>(a), static_cast<const T*>(b), n, op);
}

// 16-bit floats: through float32, in blocks so that the float loops vectorise.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
HVDRUN_INLINE void apply16(uint16_t* d, const uint16_t* s, size_t n, hvd_op_t op) {
  constexpr size_t kBlock = 256;
  float a[kBlock], b[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) {
      a[i] = ToF(d[base + i]);
      b[i] = ToF(s[base + i]);
    }
    apply<float>(a, b, m, op);
    for (size_t i = 0; i < m; ++i) d[base + i] = FromF(a[i]);
  }
}

template <class T>
void divide(T* d, size_t n, double divisor) {
  T inv = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) d[i] = d[i] / inv;
}

// Built for AVX-512 and AVX2 as well as the baseline, the loader picks the best the CPU has
// (GCC's target_clones: an ifunc). The loops above are inlined into each clone.
// Not under ThreadSanitizer: the clones' resolver runs while the library is relocated, before
// TSan's runtime is set up, and its instrumented entry crashes the process.
#if defined(__SANITIZE_THREAD__)
#define HVDRUN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HVDRUN_TSAN 1
#endif
#endif
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(HVDRUN_TSAN)
#define HVDRUN_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HVDRUN_SIMD_CLONES  // (no ifunc, not x86, or TSan: the baseline build only)
#endif

HVDRUN_SIMD_CLONES void reduce_aligned(void* dst, const void* src, size_t n, hvd_dtype_t t, hvd_op_t op) {
  switch (t) {
    case hvd_dtype_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_INT8: return apply(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), n, op);
    case HVD_UINT8: return apply(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, op);
    case HVD_INT16: return apply(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), n, op);
    case HVD_INT32: return apply(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case HVD_INT64: return apply(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    case HVD_FLOAT32: return apply(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case HVD_FLOAT64: return apply(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case HVD_BOOL: return apply(static_cast<bool*>(dst), static_cast<const bool*>(src), n, op);
    case HVD_FLOAT16:
      return apply16<half_to_float, float_to_half>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
    case HVD_BFLOAT16:
      return apply16<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
  }
}

}  // namespace

// Data a byte ring left where it lies (shared memory) can be misaligned for its dtype: such
// buffers are reduced through aligned blocks (memcpy), aligned ones in place.
void reduce_into(void* dst, const void* src, size_t n, hvd_dtype_t t, hvd_op_t op) {
  size_t es = dtype_size(t);
  auto misaligned = [es](const void* p) { return es > 1 && reinterpret_cast<uintptr_t>(p) % es != 0; };
  if (!misaligned(dst) && !misaligned(src)) return reduce_aligned(dst, src, n, t, op);
  alignas(64) unsigned char a[4096], b[4096];
  size_t per = sizeof(a) / es;
  for (size_t i = 0; i < n; i += per) {
    size_t m = std::min(per, n - i);
    auto* d = static_cast<unsigned char*>(dst) + i * es;
    std::memcpy(a, d, m * es);
    std::memcpy(b, static_cast<const unsigned char*>(src) + i * es, m * es);
    reduce_aligned(a, b, m, t, op);
    std::memcpy(d, a, m * es);
  }
}

namespace {
HVDRUN_SIMD_CLONES bool reduce_pair_aligned(void* dst, const void* a, const void* b, size_t n, hvd_dtype_t t,
                                            hvd_op_t op) {
  switch (t) {
    case HVD_INT8: apply3_as<int8_t>(dst, a, b, n, op); return true;
    case HVD_UINT8: apply3_as<uint8_t>(dst, a, b, n, op); return true;
    case HVD_INT16: apply3_as<int16_t>(dst, a, b, n, op); return true;
    case HVD_INT32: apply3_as<int32_t>(dst, a, b, n, op); return true;
    case HVD_INT64: apply3_as<int64_t>(dst, a, b, n, op); return true;
    case HVD_FLOAT32: apply3_as<float>(dst, a, b, n, op); return true;
    case HVD_FLOAT64: apply3_as<double>(dst, a, b, n, op); return true;
    case HVD_BOOL: apply3_as<bool>(dst, a, b, n, op); return true;
    default: return false;  // 16-bit floats: through float32 blocks
  }
}
}  // namespace

void reduce_pair(void* dst, const void* a, const void* b, size_t n, hvd_dtype_t t, hvd_op_t op) {
  size_t es = dtype_size(t);
  auto aligned = [es](const void* p) { return reinterpret_cast<uintptr_t>(p) % es == 0; };
  if (aligned(dst) && aligned(a) && aligned(b) && reduce_pair_aligned(dst, a, b, n, t, op)) return;
  std::memcpy(dst, a, n * es);
  reduce_into(dst, b, n, t, op);
}

void scale_down(void* buf, size_t n, hvd_dtype_t t, double divisor) {
  switch (t) {
    case HVD_FLOAT32: return divide(static_cast<float*>(buf), n, divisor);
    case HVD_FLOAT64: return divide(static_cast<double*>(buf), n, divisor);
    case HVD_FLOAT16:
    case HVD_BFLOAT16: {
      auto* p = static_cast<uint16_t*>(buf);
      bool half = t == HVD_FLOAT16;
      for (size_t i = 0; i < n; ++i) {
        float v = (half ? half_to_float(p[i]) : bf16_to_float(p[i])) / static_cast<float>(divisor);
        p[i] = half ? float_to_half(v) : float_to_bf16(v);
      }
      return;
    }
    default:
      return;
  }
}

size_t dtype_size(hvd_dtype_t t) {
  switch (t) {
    case hvd_dtype_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_INT8: case HVD_UINT8: case HVD_BOOL: return 1;
    case HVD_FLOAT16: case HVD_BFLOAT16: case HVD_INT16: return 2;
    case HVD_INT32: case HVD_FLOAT32: return 4;
    case HVD_INT64: case HVD_FLOAT64: return 8;
  }
  return 0;
}

const char* dtype_name(hvd_dtype_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "int16", "bool"};
  return dtype_valid(t) ? names[t] : "invalid";
}

const char* op_name(hvd_op_t op) {
  static const char* names[] = {"sum", "average", "min", "max", "product"};
  return op_valid(op) ? names[op] : "invalid";
}

bool dtype_valid(int t) { return t >= HVD_INT8 && t <= HVD_BOOL; }
bool op_valid(int op) { return op >= HVD_OP_SUM && op <= HVD_OP_PRODUCT; }
bool dtype_is_float(hvd_dtype_t t) {
  return t == HVD_FLOAT16 || t == HVD_BFLOAT16 || t == HVD_FLOAT32 || t == HVD_FLOAT64;
}

// dst[i] = src[i] * mul / div (src null: zeros). Integer dtypes are only copied (their
// scales are 1, checked at submit).
void scale_copy(void* dst, const void* src, size_t count, hvd_dtype_t t, double mul, double div) {
  const size_t bytes = count * dtype_size(t);
  if (!src) {
    std::memset(dst, 0, bytes);
    return;
  }
  if (mul == 1 && div == 1) {
    if (dst != src) std::memmove(dst, src, bytes);
    return;
  }
  switch (t) {
    case HVD_FLOAT32: {
      const float m = static_cast<float>(mul), d = static_cast<float>(div);
      auto* o = static_cast<float*>(dst);
      auto* i = static_cast<const float*>(src);
      if (div == 1)
        for (size_t k = 0; k < count; ++k) o[k] = i[k] * m;
      else
        for (size_t k = 0; k < count; ++k) o[k] = i[k] * m / d;
      return;
    }
    case HVD_FLOAT64: {
      auto* o = static_cast<double*>(dst);
      auto* i = static_cast<const double*>(src);
      for (size_t k = 0; k < count; ++k) o[k] = i[k] * mul / div;
      return;
    }
    case HVD_FLOAT16: {
      auto* o = static_cast<uint16_t*>(dst);
      auto* i = static_cast<const uint16_t*>(src);
      for (size_t k = 0; k < count; ++k)
        o[k] = float_to_half(static_cast<float>(half_to_float(i[k]) * mul / div));
      return;
    }
    case HVD_BFLOAT16: {
      auto* o = static_cast<uint16_t*>(dst);
      auto* i = static_cast<const uint16_t*>(src);
      for (size_t k = 0; k < count; ++k) o[k] = float_to_bf16(static_cast<float>(bf16_to_float(i[k]) * mul / div));
      return;
    }
    default:
      if (dst != src) std::memmove(dst, src, bytes);
  }
}

}  // namespace hvdrun
