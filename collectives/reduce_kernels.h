// Element-wise reductions dst[i] = op(dst[i], src[i]), built with -O3 so that the compiler
// vectorises them (GCC 12 does not at -O2).
#pragma once

#include <cstddef>

#include "hvdrun/hvdrun.h"

namespace hvdrun {

// AVERAGE reduces as SUM; the division happens once, in scale().
void reduce_into(void* dst, const void* src, size_t count, hvd_dtype_t dtype, hvd_op_t op);
// dst[i] = op(a[i], b[i]): bitwise what copying a to dst and reducing b into it gives, in
// one pass. dst must not overlap a or b.
void reduce_pair(void* dst, const void* a, const void* b, size_t count, hvd_dtype_t dtype, hvd_op_t op);
// buf[i] /= divisor, for floating types.
void scale_down(void* buf, size_t count, hvd_dtype_t dtype, double divisor);
// dst[i] = src[i] * mul / div (src null: zeros). Integer dtypes are only copied (their
// scales are 1, checked at submit). dst may be src.
void scale_copy(void* dst, const void* src, size_t count, hvd_dtype_t t, double mul, double div);

}  // namespace hvdrun
