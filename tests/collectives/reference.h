// Inputs and expected results shared by the threads-as-ranks and multi-process tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/dtype.h"

namespace hvdrun::testref {

// Small integer values, exact in every dtype even when summed or multiplied over 7 ranks.
inline double input_value(int rank, size_t i, int n, hvd_op_t op) {
  if (op == HVD_OP_PRODUCT) return rank == static_cast<int>(i % n) ? 2.0 : 1.0;
  return 1.0 + static_cast<double>((rank + i) % 3);
}

inline double expected_value(size_t i, int n, hvd_op_t op) {
  double acc = input_value(0, i, n, op);
  for (int r = 1; r < n; ++r) {
    double v = input_value(r, i, n, op);
    switch (op) {
      case hvd_op_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
      case HVD_OP_SUM: case HVD_OP_AVERAGE: acc += v; break;
      case HVD_OP_PRODUCT: acc *= v; break;
      case HVD_OP_MIN: acc = std::min(acc, v); break;
      case HVD_OP_MAX: acc = std::max(acc, v); break;
    }
  }
  return op == HVD_OP_AVERAGE ? acc / n : acc;
}

inline void store(void* buf, size_t i, hvd_dtype_t t, double v) {
  switch (t) {
    case hvd_dtype_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_INT8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case HVD_UINT8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case HVD_INT32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case HVD_INT64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case HVD_FLOAT16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case HVD_BFLOAT16: static_cast<uint16_t*>(buf)[i] = float_to_bf16(static_cast<float>(v)); break;
    case HVD_FLOAT32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case HVD_FLOAT64: static_cast<double*>(buf)[i] = v; break;
    case HVD_INT16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case HVD_BOOL: static_cast<bool*>(buf)[i] = v != 0; break;
  }
}

inline double load(const void* buf, size_t i, hvd_dtype_t t) {
  switch (t) {
    case hvd_dtype_int_range_: break;  // not a value (hvdrun.h): refused before it gets here
    case HVD_INT8: return static_cast<const int8_t*>(buf)[i];
    case HVD_UINT8: return static_cast<const uint8_t*>(buf)[i];
    case HVD_INT32: return static_cast<const int32_t*>(buf)[i];
    case HVD_INT64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case HVD_FLOAT16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case HVD_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case HVD_FLOAT32: return static_cast<const float*>(buf)[i];
    case HVD_FLOAT64: return static_cast<const double*>(buf)[i];
    case HVD_INT16: return static_cast<const int16_t*>(buf)[i];
    case HVD_BOOL: return static_cast<const bool*>(buf)[i];
  }
  return 0;
}

// Tolerance against the float64 reference: exact for integers and exact inputs; one
// rounding of the type for an average.
inline double tolerance(hvd_dtype_t t, double expect) {
  double rel = t == HVD_FLOAT16 ? 1.0 / 1024 : t == HVD_BFLOAT16 ? 1.0 / 128 : t == HVD_FLOAT32 ? 1e-6 : 1e-12;
  return dtype_is_float(t) ? std::fabs(expect) * rel : 0;
}

}  // namespace hvdrun::testref
