#pragma once

// spdlog, for the files that log. spdlog's logger formats through fmt's
// detail::vformat_to<char>, which fmt 9 defines in its header without declaring it extern:
// every file that logs with arguments instantiated and optimised fmt's whole formatting
// engine again (integers, floats, padding: ~70 KB of code, 2-3 CPU-seconds at -O3).
// hvdrun_log (common/log_library.cc) instantiates it once; this declaration sends the
// other files to that one.
#include <spdlog/spdlog.h>

#if !defined(SPDLOG_COMPILED_LIB) || defined(FMT_HEADER_ONLY)
#error common/log.h is for the files that link hvdrun_log (SPDLOG_COMPILED_LIB, no FMT_HEADER_ONLY)
#endif

FMT_BEGIN_NAMESPACE
namespace detail {
extern template FMT_API void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                        locale_ref);
}  // namespace detail
FMT_END_NAMESPACE
