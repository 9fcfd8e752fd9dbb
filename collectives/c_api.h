// The C API's side of the error vocabulary: the HVD_ERR_* code of each error kind
// (common/result.h). The one place that makes that choice; defined in c_api.cc.
#pragma once

#include "common/result.h"

int hvd_code_of(hvdrun::ErrorKind kind);
