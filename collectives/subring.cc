#include "collectives/subring.h"

#include <thread>

#include "common/deadline.h"

namespace hvdrun {

Result<std::unique_ptr<Ring>> connect_subring(const RingSetup& s, const std::string& name, int index, int size,
                                              int right, int left) {
  auto err = [&](const std::string& m, ErrorKind kind) {
    return make_error(kind, "rank " + std::to_string(s.rank) + ": " + name + " ring: " + m);
  };
  if (auto b = s.store->barrier("hvdrun/ring/" + name, s.size, s.timeout_s); !b)
    return err("barrier before connecting: " + b.error().message, ErrorKind::kRendezvous);
  if (index < 0) return std::unique_ptr<Ring>();
  if (size == 1) return std::make_unique<Ring>(0, 1, transport::Pair{}, transport::Pair{}, s.ring);
  const auto deadline = deadline_in(s.timeout_s);
  auto to = s.store->peer(right, deadline);
  if (!to) return err("rank " + std::to_string(right) + "'s address: " + to.error().message, lookup_kind(to.error()));
  auto from = s.store->peer(left, deadline);
  if (!from) return err("rank " + std::to_string(left) + "'s address: " + from.error().message, lookup_kind(from.error()));
  Result<transport::Pair> out = make_error(ErrorKind::kInternal, "not connected");
  std::thread connector([&] { out = transport::connect_pair(*to, s.pairs); });
  auto in = transport::accept_pair(s.listen_fd, *from, s.pairs);
  connector.join();
  if (!out) return err(out.error().message, ErrorKind::kPeerLost);
  if (!in) return err(in.error().message, ErrorKind::kPeerLost);
  return std::make_unique<Ring>(index, size, std::move(*out), std::move(*in), s.ring);
}

}  // namespace hvdrun
