// The rendezvous server: accepting connections (each a Session, session.cc), the job's
// key-value store and its waiters, registration rounds and the start time-out.
#include "rendezvous/server.h"

#include <fcntl.h>

#include <future>

#include "common/deadline.h"
#include "rendezvous/server_impl.h"

namespace hvdrun::rdv {

namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// Accepting again after EMFILE/ENFILE (and ENOBUFS/ENOMEM): from 10 ms, doubling, to 1 s.
constexpr auto kAcceptBackoffMin = std::chrono::milliseconds(10);
constexpr auto kAcceptBackoffMax = std::chrono::milliseconds(1000);

}  // namespace

std::string start_timeout_message(const std::vector<int>& missing, const std::vector<ExpectedRank>& ranks,
                                  const std::string& endpoint, double timeout, size_t max_listed) {
  std::string msg;
  for (size_t i = 0; i < missing.size() && i < max_listed; ++i) {
    int r = missing[i];
    if (!msg.empty()) msg += "\n";
    msg += "hvdrun: rank " + std::to_string(r) + " (host " + ranks[r].host + ", local rank " +
           std::to_string(ranks[r].local_rank) + ") did not reach the rendezvous at " + endpoint + " within " +
           fmt_seconds(timeout) + " s";
  }
  if (missing.size() > max_listed)
    msg += "\nhvdrun: ... and " + std::to_string(missing.size() - max_listed) + " more ranks did not reach it";
  return msg;
}

void Server::Impl::accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) return on_accept_error(ec);
    accept_delay = std::chrono::milliseconds(0);
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    auto s = std::make_shared<Session>(*this, std::move(sock));
    sessions.insert(s);
    s->start();
    accept();
  });
}

// Out of descriptors or memory, the connection waits in the backlog and accepting at once
// would fail again at once (a spinning thread): wait, longer each time, up to a second.
void Server::Impl::on_accept_error(const boost::system::error_code& ec) {
  int e = ec.value();
  bool exhausted = ec.category() == boost::system::system_category() &&
                   (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM);
  warn("cannot accept a connection: " + ec.message(),
       "cannot accept a connection: " + ec.message() +
           (exhausted ? "; accepting again after a pause" : ""));
  if (!exhausted) return accept();  // ECONNABORTED and the like: that connection is gone
  accept_delay = std::clamp(accept_delay * 2, kAcceptBackoffMin, kAcceptBackoffMax);
  accept_backoff.expires_after(accept_delay);
  accept_backoff.async_wait([this](const boost::system::error_code& tec) {
    if (!tec) accept();
  });
}

void Server::Impl::arm_log_flush() {
  log_flush_timer.expires_after(std::chrono::seconds(1));
  log_flush_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    log_limiter.flush(LogLimiter::Clock::now(), [](const std::string& l) { spdlog::warn("rendezvous: {}", l); });
    arm_log_flush();
  });
}

Status Server::Impl::store(const std::string& key, std::string value) {
  if (value.size() > kMaxValueBytes)
    return make_error(ErrorKind::kInvalidArgument,
                      "value of " + std::to_string(value.size()) + " bytes for key " + quoted(key) +
                          " exceeds the limit of " + std::to_string(kMaxValueBytes) + " bytes");
  auto it = kv.find(key);
  size_t old = it == kv.end() ? 0 : key.size() + it->second.size() + kStoreEntryOverhead;
  size_t now = store_bytes - old + key.size() + value.size() + kStoreEntryOverhead;
  if (now > kMaxStoreBytes)
    return make_error(ErrorKind::kInvalidArgument,
                      "setting key " + quoted(key) + " would grow the job's key-value store to " +
                          std::to_string(now) + " bytes, over its limit of " + std::to_string(kMaxStoreBytes) + " bytes");
  store_bytes = now;
  if (it == kv.end())
    kv.emplace(key, std::move(value));
  else
    it->second = std::move(value);
  return {};
}

void Server::Impl::drop_waiter(const std::shared_ptr<Waiter>& w) {
  for (const auto& k : w->missing) {
    auto range = waiters.equal_range(k);
    for (auto it = range.first; it != range.second;) it = it->second == w ? waiters.erase(it) : std::next(it);
  }
}

void Server::Impl::arm_start_timer() {
  start_timer.expires_after(seconds_to_duration(opts.start_timeout));
  start_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_start_timer();
  });
}

void Server::Impl::on_registered() {
  ++registered;
  if (start_timer_idle) {  // the first registration after an idle start timer re-arms it
    start_timer_idle = false;
    arm_start_timer();
  }
  if (!complete()) return;
  int size = static_cast<int>(peers.size());
  start_timer.cancel();
  for (auto& sess : pending_register) {
    if (sess->closed()) continue;
    int r = sess->rank();
    Registered g{size, peers[(r - 1 + size) % size], peers[(r + 1) % size]};
    sess->send(MsgType::kRegistered, encode_registered(g));
  }
  pending_register.clear();
  pending_register.shrink_to_fit();
  spdlog::debug("rendezvous: all {} ranks registered", size);
}

// A later round (hvd_init after hvd_shutdown): complete when every rank registered again.
void Server::Impl::on_reregistered(int round) {
  for (int c : reg_count)
    if (c < round) return;
  int size = static_cast<int>(peers.size());
  std::vector<std::shared_ptr<Session>> keep;
  for (auto& sess : pending_register) {
    if (sess->closed()) continue;
    if (sess->round() != round) {
      keep.push_back(sess);
      continue;
    }
    int r = sess->rank();
    Registered g{size, peers[(r - 1 + size) % size], peers[(r + 1) % size]};
    sess->send(MsgType::kRegistered, encode_registered(g));
  }
  pending_register.swap(keep);
  spdlog::debug("rendezvous: all {} ranks registered again (round {})", size, round);
}

// Elastic: a new round's table; registrations still waiting for an earlier round are
// told it is over (they read the newest round and register again).
void Server::Impl::begin_round(int round, std::vector<ExpectedRank> ranks) {
  elastic_round = round;
  opts.ranks = std::move(ranks);
  size_t n = opts.ranks.size();
  peers.assign(n, PeerInfo{});
  reg_count.assign(n, 0);
  owner.assign(n, {});
  registered = 0;
  auto stale = std::move(pending_register);
  pending_register.clear();
  for (auto& sess : stale)
    if (!sess->closed()) sess->tell_stale_round();
  if (start_timer_begun) {  // the new round's workers have the start time-out to register
    start_timer_idle = false;
    start_timer.cancel();
    arm_start_timer();
  }
  spdlog::debug("rendezvous: elastic round {} of {} ranks", round, n);
}

void Server::Impl::on_start_timer() {
  if (complete()) return;
  if (registered == 0) {
    // Nobody uses the rendezvous yet (a job without libhvdrun, or a slow start): the
    // clock starts again at the first registration.
    start_timer_idle = true;
    return;
  }
  std::vector<int> missing;
  for (size_t r = 0; r < peers.size(); ++r)
    if (peers[r].rank < 0) missing.push_back(static_cast<int>(r));
  if (cbs.on_start_timeout) cbs.on_start_timeout(start_timeout_message(missing, opts.ranks, endpoint(), opts.start_timeout));
}

void Server::Impl::notify_key(const std::string& key) {
  auto range = waiters.equal_range(key);
  std::vector<std::shared_ptr<Waiter>> hit;
  for (auto it = range.first; it != range.second; ++it) hit.push_back(it->second);
  waiters.erase(range.first, range.second);
  for (auto& w : hit) {
    w->missing.erase(key);
    if (w->done || !w->missing.empty()) continue;
    w->done = true;
    open_waits--;
    w->timer->cancel();
    w->session->waits_done();
    if (!w->session->closed()) w->session->send(MsgType::kOk, "");
  }
}

namespace {

// hvdrun --horovod: Horovod's HTTP key-value store beside ours, on the same io_context.
Status listen_horovod(Server::Impl* impl) {
  const HorovodServing& hs = impl->opts.horovod;
  auto allowed = PeerAllowList::from(hs.allowed_peers, hs.allow_loopback);
  if (!allowed) return wrap(allowed.error(), "rendezvous");
  std::vector<std::string> hosts;
  std::vector<int> local_ranks;
  for (const auto& r : impl->opts.ranks) {
    hosts.push_back(r.host);
    local_ranks.push_back(r.local_rank);
  }
  HorovodHttpOptions ho;
  ho.bind_address = impl->opts.bind_address;
  ho.allowed = std::move(*allowed);
  ho.scope_sizes = horovod_scope_sizes(hosts, local_ranks);
  ho.limits = hs.limits;
  ho.header_timeout = hs.header_timeout;
  ho.request_timeout = hs.request_timeout;
  ho.max_connections = hs.max_connections;
  ho.max_reading_per_peer = hs.max_reading_per_peer;
  Server::Impl* p = impl;
  auto h = HorovodHttpServer::listen(impl->io, std::move(ho), [p](const std::string& kind, const std::string& line) {
    p->warn(kind, line);
  });
  if (!h) return h.error();
  impl->horovod = std::move(*h);
  return {};
}

}  // namespace

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Server>> Server::start(ServerOptions options, ServerCallbacks callbacks) {
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  impl->cbs = std::move(callbacks);
  impl->peers.assign(impl->opts.ranks.size(), PeerInfo{});
  impl->reg_count.assign(impl->opts.ranks.size(), 0);
  impl->owner.assign(impl->opts.ranks.size(), {});
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(impl->opts.bind_address, ec);
  if (ec) return make_error(ErrorKind::kInvalidArgument,
                            "rendezvous: bad listen address '" + impl->opts.bind_address + "'");
  tcp::endpoint ep(addr, static_cast<unsigned short>(impl->opts.port));
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(65535, ec);
  if (ec)
    return make_error(ErrorKind::kLaunchFailed, "rendezvous: cannot listen on " + impl->opts.bind_address + ":" +
                                                     std::to_string(impl->opts.port) + ": " + ec.message());
  ::fcntl(impl->acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  if (impl->opts.horovod.enabled)
    if (auto st = listen_horovod(impl.get()); !st) return st.error();
  impl->address = impl->opts.bind_address;
  impl->port = impl->acceptor.local_endpoint().port();
  impl->accept();
  impl->arm_log_flush();
  Impl* p = impl.get();
  impl->thread = std::thread([p] {
    // A handler that throws loses its own work, never the server: run on.
    while (true) {
      try {
        p->io.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("rendezvous: internal error (the server goes on): {}", e.what());
      }
    }
  });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

void Server::begin_start_timer() {
  Impl* p = impl_.get();
  if (p->opts.start_timeout <= 0) return;
  asio::post(p->io, [p] {
    p->start_timer_begun = true;
    p->arm_start_timer();
  });
}

namespace {

// Runs `fn` on the server's thread and returns what it returned (the caller waits).
template <class Fn>
auto on_server_thread(asio::io_context& io, Fn fn) {
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto result = task.get_future();
  asio::post(io, [&task] { task(); });
  return result.get();
}

}  // namespace

void Server::begin_round(int round, std::vector<ExpectedRank> ranks) {
  Impl* p = impl_.get();
  on_server_thread(p->io, [p, round, &ranks] { p->begin_round(round, std::move(ranks)); });
}

Status Server::set(const std::string& key, const std::string& value) {
  Impl* p = impl_.get();
  return on_server_thread(p->io, [p, &key, &value]() -> Status {
    if (auto st = p->store(key, value); !st) return st;
    p->notify_key(key);
    return {};
  });
}

int Server::round() const { return impl_->elastic_round; }

Server::~Server() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->log_limiter.flush(LogLimiter::Clock::now(), [](const std::string& l) { spdlog::warn("rendezvous: {}", l); },
                           true);
  // Break the session <-> waiter cycles.
  impl_->waiters.clear();
  impl_->pending_register.clear();
  impl_->sessions.clear();
}

const std::string& Server::address() const { return impl_->address; }
int Server::port() const { return impl_->port; }
int Server::horovod_port() const { return impl_->horovod ? impl_->horovod->port() : 0; }
int Server::horovod_refused() const { return impl_->horovod ? impl_->horovod->refused() : 0; }
int Server::registered() const { return impl_->registered; }
int Server::rejected() const { return impl_->rejected; }
int Server::waiting() const { return impl_->open_waits; }

}  // namespace hvdrun::rdv
