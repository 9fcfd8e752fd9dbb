#include "collectives/buffer_checks.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "collectives/dtype.h"

namespace hvdrun {

uintptr_t address_space_top() {
#if defined(__x86_64__)
  return uintptr_t{1} << 56;
#elif defined(__aarch64__)
  return uintptr_t{1} << 52;
#else
  return UINTPTR_MAX;
#endif
}

namespace {

Error invalid(std::string message) { return make_error(ErrorKind::kInvalidArgument, std::move(message)); }

std::string indexed(const char* name, int n, int i) { return n > 1 ? fmt::format("{}[{}]", name, i) : name; }

// `value` units of `unit_bytes` each, from `p` (null: memory libhvdrun allocates, named
// `buffer`), must end below the top of the address space: their bytes, or an error naming
// the value and the most that fits.
Result<size_t> fit(const char* what, const std::string& name, size_t value, size_t unit_bytes,
                   const std::string& buffer, const void* p, const std::string& unit) {
  if (value == 0 || unit_bytes == 0) return size_t{0};
  const uintptr_t top = address_space_top(), base = reinterpret_cast<uintptr_t>(p);
  const size_t most = base < top ? (top - base) / unit_bytes : 0;
  if (value <= most) return value * unit_bytes;
  std::string where = p ? fmt::format("{} at {}", buffer, p) : buffer;
  return invalid(fmt::format("{}: {} {} is too large: {} can hold at most {} {} below the top of the address space "
                             "({:#x})",
                             what, name, value, where, most, unit, top));
}

std::string elements(hvd_dtype_t dtype) { return std::string(dtype_name(dtype)) + " elements"; }

std::string rows_of(size_t row_elems, hvd_dtype_t dtype) {
  return fmt::format("rows of {} {}", row_elems, elements(dtype));
}

// One tensor's buffers as the call names them.
struct Buffers {
  std::string send_name, recv_name;
  const void* send;
  size_t send_bytes;
  const void* recv;
  size_t recv_bytes;
};

struct Span {
  uintptr_t begin, end;
  size_t tensor;
};

Error overlap(const char* what, const std::string& a, const void* pa, size_t na, const std::string& b, const void* pb,
              size_t nb) {
  return invalid(fmt::format("{}: {} ({}, {} bytes) overlaps {} ({}, {} bytes): expected the same pointer (in place) "
                             "or buffers that do not overlap",
                             what, a, pa, na, b, pb, nb));
}

// Results may not overlap one another, nor any input but their own when they start at it
// (in place): a result written over an input not yet read is wrong data.
Status check_apart(const char* what, const std::vector<Buffers>& t) {
  std::vector<Span> recvs;
  for (size_t i = 0; i < t.size(); ++i) {
    auto b = reinterpret_cast<uintptr_t>(t[i].recv);
    if (t[i].recv_bytes) recvs.push_back({b, b + t[i].recv_bytes, i});
  }
  std::sort(recvs.begin(), recvs.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  auto recv_error = [&](const Span& x, const Span& y) {
    return overlap(what, t[x.tensor].recv_name, t[x.tensor].recv, t[x.tensor].recv_bytes, t[y.tensor].recv_name,
                   t[y.tensor].recv, t[y.tensor].recv_bytes);
  };
  for (size_t k = 1; k < recvs.size(); ++k)
    if (recvs[k].begin < recvs[k - 1].end) return recv_error(recvs[k - 1], recvs[k]);
  // The results are now disjoint and sorted: each input meets them in one run.
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].send_bytes) continue;
    const uintptr_t b = reinterpret_cast<uintptr_t>(t[i].send), e = b + t[i].send_bytes;
    auto it = std::partition_point(recvs.begin(), recvs.end(), [&](const Span& r) { return r.end <= b; });
    for (; it != recvs.end() && it->begin < e; ++it) {
      if (it->tensor == i && it->begin == b) continue;  // in place
      const Buffers& o = t[it->tensor];
      return overlap(what, o.recv_name, o.recv, o.recv_bytes, t[i].send_name, t[i].send, t[i].send_bytes);
    }
  }
  return {};
}

}  // namespace

Status check_allreduce_buffers(const char* what, int n, const void* const* sends, void* const* recvs,
                               const size_t* counts, hvd_dtype_t dtype, const hvd_dtype_t* dtypes) {
  const size_t top = address_space_top();
  size_t total = 0;
  std::vector<Buffers> t;
  for (int i = 0; i < n; ++i) {
    if (dtypes) dtype = dtypes[i];
    const size_t es = dtype_size(dtype);
    Buffers b{indexed(n > 1 ? "sendbufs" : "sendbuf", n, i), indexed(n > 1 ? "recvbufs" : "recvbuf", n, i), sends[i], 0,
              recvs[i], 0};
    std::string count = n > 1 ? fmt::format("counts[{}]", i) : "count";
    auto s = fit(what, count, counts[i], es, b.send_name, sends[i], elements(dtype));
    if (!s) return s.error();
    auto r = fit(what, count, counts[i], es, b.recv_name, recvs[i], elements(dtype));
    if (!r) return r.error();
    if (*s > top - total)
      return invalid(fmt::format("{}: counts[0..{}] add up to more bytes than the address space holds ({:#x}); "
                                 "counts[{}] is {}",
                                 what, i, top, i, counts[i]));
    total += *s;
    b.send_bytes = *s;
    b.recv_bytes = *r;
    t.push_back(std::move(b));
  }
  return check_apart(what, t);
}

Status check_broadcast_buffer(const char* what, const void* buf, size_t count, hvd_dtype_t dtype) {
  auto b = fit(what, "count", count, dtype_size(dtype), "buf", buf, elements(dtype));
  return b ? Status{} : Status{b.error()};
}

// row_elems x dtype must fit before it is a unit of anything.
static Result<size_t> row_bytes(const char* what, size_t rows, size_t row_elems, hvd_dtype_t dtype) {
  if (!rows) return size_t{0};
  return fit(what, "row_elems", row_elems, dtype_size(dtype), "a row", nullptr, elements(dtype));
}

// One row from each of `size` ranks, in bytes: SIZE_MAX when that wraps (no buffer holds
// even one such unit, so fit refuses it).
static size_t from_every_rank(size_t row_bytes, int size) {
  size_t bytes;
  return __builtin_mul_overflow(row_bytes, static_cast<size_t>(size), &bytes) ? SIZE_MAX : bytes;
}

Status check_allgather_buffers(const char* what, const void* send, const void* recv, size_t rows, size_t row_elems,
                               hvd_dtype_t dtype, int rank, int size) {
  const bool gather = recv != nullptr;  // hvd_allgather: its rows are elements
  const char* name = gather ? "sendcount" : "rows";
  const std::string unit = gather ? elements(dtype) : rows_of(row_elems, dtype);
  auto row = row_bytes(what, rows, row_elems, dtype);
  if (!row) return row.error();
  auto s = fit(what, name, rows, *row, "sendbuf", send, unit);
  if (!s) return s.error();
  const std::string each = fmt::format("{} from each of {} ranks", unit, size);
  auto all = fit(what, name, rows, from_every_rank(*row, size), recv ? "recvbuf" : "the output", recv, each);
  if (!all) return all.error();
  if (!recv || send == static_cast<const char*>(recv) + *s * static_cast<size_t>(rank)) return {};  // its own block
  return check_apart(what, {{"sendbuf", "recvbuf", send, *s, recv, *all}});
}

Status check_alltoall_buffers(const char* what, const void* send, size_t rows, size_t row_elems,
                              const size_t* splits, hvd_dtype_t dtype, int size) {
  if (splits) {
    size_t sum = 0;
    for (int i = 0; i < size; ++i) {
      if (__builtin_add_overflow(sum, splits[i], &sum))
        return invalid(fmt::format("{}: splits[{}] = {} makes the splits add up past {}: expected splits that add up "
                                   "to rows ({})",
                                   what, i, splits[i], SIZE_MAX, rows));
    }
    if (sum != rows)
      return invalid(fmt::format("{}: splits add up to {} rows, but rows is {}", what, sum, rows));
  }
  auto row = row_bytes(what, rows, row_elems, dtype);
  if (!row) return row.error();
  auto s = fit(what, "rows", rows, *row, "sendbuf", send, rows_of(row_elems, dtype));
  if (!s) return s.error();
  // What one rank receives is at most what every rank sends: bounded like an allgather's.
  auto all = fit(what, "rows", rows, from_every_rank(*row, size), "the output", nullptr,
                 rows_of(row_elems, dtype) + fmt::format(" from each of {} ranks", size));
  return all ? Status{} : Status{all.error()};
}

Status check_reducescatter_buffers(const char* what, const void* send, const void* recv, size_t rows, size_t mine,
                                   size_t row_elems, hvd_dtype_t dtype) {
  auto row = row_bytes(what, rows, row_elems, dtype);
  if (!row) return row.error();
  auto s = fit(what, "rows", rows, *row, "sendbuf", send, rows_of(row_elems, dtype));
  if (!s) return s.error();
  auto r = fit(what, "this rank's share of rows", mine, *row, "recvbuf", recv, rows_of(row_elems, dtype));
  if (!r) return r.error();
  return check_apart(what, {{"sendbuf", "recvbuf", send, *s, recv, *r}});
}

}  // namespace hvdrun
