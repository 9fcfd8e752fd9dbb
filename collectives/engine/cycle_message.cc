#include "collectives/engine/cycle_message.h"

#include <algorithm>
#include <cstring>

namespace hvdrun {
namespace {

struct Writer {
  std::string& out;
  template <class T>
  void put(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void u64s(const std::vector<uint64_t>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (auto x : v) put(x);
  }
};

struct Reader {
  const std::string& in;
  size_t pos = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (pos + sizeof v > in.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string str() {
    uint32_t n = get<uint32_t>();
    if (!ok || pos + n > in.size()) {
      ok = false;
      return {};
    }
    std::string s = in.substr(pos, n);
    pos += n;
    return s;
  }
  // In place: valid while `in` lives.
  std::string_view view(size_t n) {
    if (!ok || pos + n > in.size()) {
      ok = false;
      return {};
    }
    std::string_view s(in.data() + pos, n);
    pos += n;
    return s;
  }
  void align(size_t a) { pos = std::min(in.size(), (pos + a - 1) / a * a); }
  void u64s(std::vector<uint64_t>* v) {
    v->clear();
    uint32_t n = get<uint32_t>();
    if (!ok || pos + 8ull * n > in.size()) {
      ok = false;
      return;
    }
    v->resize(n);
    for (auto& x : *v) x = get<uint64_t>();
  }
};

void put_spec(Writer& w, const Spec& s) {
  w.str(s.name);
  w.put<uint8_t>(static_cast<uint8_t>(s.kind));
  w.put<uint8_t>(s.dtype);
  w.put<uint8_t>(s.op);
  w.put<uint8_t>(static_cast<uint8_t>((s.device ? 1 : 0) | (s.refused ? 2 : 0)));
  w.put<int32_t>(s.root);
  w.put<double>(s.prescale);
  w.put<double>(s.postscale);
  w.u64s(s.counts);
  w.put<uint64_t>(s.row_elems);
  w.u64s(s.splits);
  w.put<uint32_t>(static_cast<uint32_t>(s.dtypes.size()));
  w.out.append(reinterpret_cast<const char*>(s.dtypes.data()), s.dtypes.size());
  w.put<uint32_t>(static_cast<uint32_t>(s.shapes.size()));
  for (auto d : s.shapes) w.put<int64_t>(d);
}

Spec get_spec(Reader& r) {
  Spec s;
  s.name = r.str();
  s.kind = static_cast<OpKind>(r.get<uint8_t>());
  s.dtype = r.get<uint8_t>();
  s.op = r.get<uint8_t>();
  const uint8_t flags = r.get<uint8_t>();
  s.device = flags & 1;
  s.refused = flags & 2;
  s.root = r.get<int32_t>();
  s.prescale = r.get<double>();
  s.postscale = r.get<double>();
  r.u64s(&s.counts);
  s.row_elems = r.get<uint64_t>();
  r.u64s(&s.splits);
  auto dtypes = r.view(r.get<uint32_t>());
  s.dtypes.assign(dtypes.begin(), dtypes.end());
  const uint32_t dims = r.get<uint32_t>();
  if (r.ok && r.pos + 8ull * dims <= r.in.size()) {
    s.shapes.resize(dims);
    for (auto& d : s.shapes) d = r.get<int64_t>();
  } else {
    r.ok = false;
  }
  return s;
}

// A rank announces a name at most once (submit refuses a name pending twice): a message
// that names one twice is corrupt (its eager data would not match the specs).
bool names_unique(const std::vector<Spec>& specs) {
  if (specs.size() < 2) return true;
  std::vector<std::string_view> names;
  names.reserve(specs.size());
  for (auto& s : specs) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  return std::adjacent_find(names.begin(), names.end()) == names.end();
}

// A group of several dtypes names one per tensor; so do shapes, when given.
bool dtypes_per_tensor(const std::vector<Spec>& specs) {
  return std::all_of(specs.begin(), specs.end(),
                     [](const Spec& s) {
                       return (s.dtypes.empty() || s.dtypes.size() == s.counts.size()) && shapes_well_formed(s);
                     });
}

}  // namespace

void encode_header(const CycleMessage& m, uint32_t eager_bytes, std::string* out) {
  Writer w{*out};
  w.put<uint8_t>(m.flags);
  w.u64s(m.bits);
  w.put<uint32_t>(static_cast<uint32_t>(m.invalid.size()));
  for (auto& n : m.invalid) w.str(n);
  w.put<uint32_t>(static_cast<uint32_t>(m.specs.size()));
  for (auto& s : m.specs) put_spec(w, s);
  w.put<uint32_t>(eager_bytes);
}

bool decode_message(const std::string& raw, size_t offset, CycleMessage* m) {
  Reader rd{raw};
  rd.pos = offset;
  m->invalid.clear();
  m->specs.clear();
  m->eager = {};
  m->flags = rd.get<uint8_t>();
  rd.u64s(&m->bits);
  uint32_t ni = rd.get<uint32_t>();
  for (uint32_t i = 0; i < ni && rd.ok; ++i) m->invalid.push_back(rd.str());
  uint32_t ns = rd.get<uint32_t>();
  for (uint32_t i = 0; i < ns && rd.ok; ++i) m->specs.push_back(get_spec(rd));
  uint32_t eager_bytes = rd.get<uint32_t>();
  rd.align(8);
  m->eager = rd.view(eager_bytes);
  return rd.ok && rd.pos == raw.size() && names_unique(m->specs) && dtypes_per_tensor(m->specs);
}

}  // namespace hvdrun
