// libFuzzer target for hvdrun --horovod's Horovod store: the input is a stream of HTTP
// requests as a client could send them. Each is parsed with the parser the server uses
// (Boost.Beast, the server's header and body limits), and what parses is handled by one
// store with small bounds; the store's accounting must stay within them (and the room it
// keeps for the job's scopes), and give every byte back when the answers are gone.
// Build: cmake -DHVDRUN_BUILD_FUZZ=ON with clang; run: build/tests/horovod_store_fuzzer -max_total_time=30
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "rendezvous/horovod_store.h"

using namespace hvdrun::rdv;
namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  HorovodStoreLimits lim;
  lim.max_value_bytes = 256;
  lim.max_keys = 16;
  lim.max_total_bytes = 4096;
  lim.max_target_bytes = 128;
  HorovodStore store({{"global", 2}, {"local_a", 1}, {"cross_0", 2}}, lim);
  // Requests are separated by a NUL byte (the fuzzer's choice of where one ends).
  while (!in.empty()) {
    size_t end = in.find('\0');
    std::string_view one = in.substr(0, end);
    in = end == std::string_view::npos ? std::string_view() : in.substr(end + 1);
    http::request_parser<http::string_body> p;
    p.header_limit(8192);
    p.body_limit(lim.max_value_bytes);
    p.eager(true);
    boost::beast::error_code ec;
    p.put(boost::asio::buffer(one.data(), one.size()), ec);
    if (!ec && !p.is_done()) p.put_eof(ec);
    if (ec || !p.is_done()) continue;
    auto& req = p.get();
    HttpAnswer a = store.handle(std::string(req.method_string()), std::string(req.target()), std::move(req.body()));
    if (a.status < 200 || a.status > 599) std::abort();
    // The job's scopes may also use the room kept for them; a bound past both is a bug.
    if (store.keys() > lim.max_keys + store.reserve().keys) std::abort();
    if (store.bytes() > lim.max_total_bytes + store.reserve().bytes) std::abort();
    if (store.keys() == 0 && store.bytes() != 0) std::abort();
  }
  {
    std::vector<HttpAnswer> held;  // answers not yet sent hold their values
    for (const char* k : {"/global/0", "/global/rank_0", "/local_a/0"}) held.push_back(store.handle("GET", k, ""));
    held.clear();
    for (const char* s : {"global", "local_a", "cross_0"})
      for (const char* k : {"0", "1", "rank_0", "rank_1"}) store.finish(s, k);
    if (store.keys() == 0 && store.bytes() != 0) std::abort();
  }
  (void)split_store_target(std::string_view(reinterpret_cast<const char*>(data), size));
  (void)PeerAllowList::from({std::string(reinterpret_cast<const char*>(data), size)});
  return 0;
}
