// spdlog and fmt compiled once, into hvdrun_log (a static library: no shared library to
// load at every start of hvdrun and of every worker). Their header-only mode compiles the
// logger, the registry, the pattern formatter and fmt's formatting core again in every file
// that logs (about 5 CPU-seconds each at -O3); with SPDLOG_COMPILED_LIB and without
// FMT_HEADER_ONLY those files only declare them. What follows is what spdlog 1.10's
// src/spdlog.cpp and src/color_sinks.cpp and fmt 9's src/format.cc compile (the parts
// hvdrun links: the default logger's ANSI-colour stdout sink, base_sink, fmt for char).
#if !defined(SPDLOG_COMPILED_LIB) || defined(FMT_HEADER_ONLY)
#error hvdrun_log compiles spdlog and fmt as libraries: SPDLOG_COMPILED_LIB, no FMT_HEADER_ONLY
#endif

#include <fmt/format-inl.h>

#include <mutex>
#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/spdlog-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                 locale_ref);
}  // namespace detail
FMT_END_NAMESPACE

template spdlog::logger::logger(std::string name, sinks_init_list::iterator begin, sinks_init_list::iterator end);
template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::base_sink<spdlog::details::null_mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_mutex>;
