#include "rendezvous/horovod_http.h"

#include <fcntl.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <spdlog/spdlog.h>

#include "common/deadline.h"
#include "common/strings.h"

namespace hvdrun::rdv {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

namespace {
constexpr size_t kHeaderLimit = 8192;
// Time to write an answer (to a client that does not read, or to a refused one).
constexpr auto kWriteTimeout = std::chrono::seconds(5);
// After answering: how long, and how much, of what a client still sends is read and dropped.
constexpr auto kLingerTime = std::chrono::seconds(1);
constexpr size_t kLingerBytes = 1u << 20;
}  // namespace

struct HorovodHttpServer::State : std::enable_shared_from_this<HorovodHttpServer::State> {
  explicit State(asio::io_context& io_, HorovodHttpOptions o, Warn w)
      : io(io_), opts(std::move(o)), store(opts.scope_sizes, opts.limits), warn(std::move(w)), acceptor(io_) {}
  asio::io_context& io;
  HorovodHttpOptions opts;
  HorovodStore store;
  Warn warn;
  tcp::acceptor acceptor;
  asio::steady_timer accept_backoff{io};
  std::chrono::milliseconds accept_delay{0};
  size_t open = 0;          // sessions alive (io thread)
  bool accept_paused = false;
  bool stopped = false;
  std::atomic<int> refused{0};
  int port = 0;

  void accept();
  void on_session_gone() {
    --open;
    if (accept_paused && !stopped && open < opts.max_connections) {
      accept_paused = false;
      accept();
    }
  }
};

namespace {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(std::shared_ptr<HorovodHttpServer::State> st, tcp::socket sock)
      : st_(std::move(st)), sock_(std::move(sock)), timer_(st_->io) {
    ++st_->open;
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    if (!ec) {
      peer_addr_ = ep.address();
      peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    } else {
      peer_ = "?";
    }
  }
  ~HttpSession() { st_->on_session_gone(); }

  void start() {
    if (peer_ == "?" || !st_->opts.allowed.allows(peer_addr_)) {
      st_->refused++;
      st_->warn("refused a Horovod store connection from a host outside the job",
                "Horovod store: refused a connection from " + peer_ + ": not a host of this job");
      return answer(403, "hvdrun's Horovod store answers only the hosts of its job\n");
    }
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(st_->opts.limits.max_value_bytes);
    timer_.expires_after(seconds_to_duration(st_->opts.request_timeout));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->answering_) return;
      self->timed_out_ = true;
      boost::system::error_code ignored;
      self->sock_.cancel(ignored);
    });
    http::async_read(sock_, buf_, *parser_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
      self->on_read(ec);
    });
  }

 private:
  void on_read(boost::system::error_code ec) {
    if (timed_out_) {
      char secs[32];
      snprintf(secs, sizeof secs, "%g", st_->opts.request_timeout);
      return fail(408, std::string("request not complete within ") + secs + " s");
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) {
      close();  // the client went away without a (whole) request
      return;
    }
    if (ec == http::error::body_limit)
      return fail(413, "value exceeds the limit of " + std::to_string(st_->opts.limits.max_value_bytes) + " bytes");
    if (ec == http::error::header_limit)
      return fail(431, "request header exceeds " + std::to_string(kHeaderLimit) + " bytes");
    if (ec) return fail(400, "malformed HTTP request: " + ec.message());
    auto& req = parser_->get();
    std::string method(req.method_string());
    std::string target(req.target());
    if (auto host = req[http::field::host]; !store_host_header_ok(std::string_view(host.data(), host.size())))
      return fail(400, "Host '" + printable(std::string_view(host.data(), host.size()), 64) +
                           "': expected the store's IP address (a host name is refused: DNS rebinding)");
    if (method == "PUT" && !req.has_content_length() && !req.chunked())
      return fail(411, "PUT " + printable(target, 64) + " without Content-Length");
    HttpAnswer a = st_->store.handle(method, target, std::move(req.body()));
    if (a.status != 200 && a.status != 404) {
      st_->refused++;
      std::string msg = a.body;
      while (!msg.empty() && msg.back() == '\n') msg.pop_back();
      st_->warn("Horovod store: " + std::to_string(a.status),
                "Horovod store: " + printable(method, 16) + " from " + peer_ + ": " + std::to_string(a.status) + " " +
                    msg);
    }
    answer(a.status, std::move(a.body));
  }

  void fail(int status, const std::string& why) {
    st_->refused++;
    st_->warn("Horovod store: " + std::to_string(status), "Horovod store: request from " + peer_ + ": " +
                                                              std::to_string(status) + " " + why);
    answer(status, why + "\n");
  }

  void answer(int status, std::string body) {
    answering_ = true;
    res_.emplace();
    res_->version(11);
    res_->result(static_cast<unsigned>(status));
    res_->set(http::field::server, "hvdrun");
    res_->set(http::field::connection, "close");
    if (status == 405) res_->set(http::field::allow, "GET, PUT, DELETE");
    res_->set(http::field::content_type, status == 200 ? "application/octet-stream" : "text/plain");
    res_->body() = std::move(body);
    res_->prepare_payload();  // Content-Length (Horovod's client reads up to it)
    res_->keep_alive(false);
    timer_.expires_after(kWriteTimeout);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      boost::system::error_code ignored;
      self->sock_.close(ignored);
    });
    http::async_write(sock_, *res_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) return self->close();
      self->linger();
    });
  }

  // After the answer: no more to send; what the client still sends (the rest of a request
  // refused early) is read and dropped until it closes, for at most kLingerTime and
  // kLingerBytes, so that closing with unread data (a reset) does not destroy the answer
  // before the client has read it.
  void linger() {
    boost::system::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    timer_.expires_after(kLingerTime);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& tec) {
      if (!tec) self->close();
    });
    drain();
  }

  void drain() {
    if (!drain_buf_) drain_buf_ = std::make_unique<std::array<char, 4096>>();
    sock_.async_read_some(asio::buffer(*drain_buf_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > kLingerBytes) return self->close();
      self->drain();
    });
  }

  void close() {
    boost::system::error_code ec;
    timer_.cancel();
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    sock_.close(ec);
  }

  std::shared_ptr<HorovodHttpServer::State> st_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  asio::ip::address peer_addr_;
  std::string peer_;
  boost::beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
  std::unique_ptr<std::array<char, 4096>> drain_buf_;
  size_t drained_ = 0;
  bool timed_out_ = false, answering_ = false;
};

}  // namespace

void HorovodHttpServer::State::accept() {
  if (stopped) return;
  if (open >= opts.max_connections) {
    accept_paused = true;  // the next ones wait in the backlog until a session ends
    return;
  }
  // The handlers hold the state: it lives until the acceptor is closed (or the io_context
  // is destroyed) and the last session has ended.
  acceptor.async_accept([this, keep = shared_from_this()](const boost::system::error_code& ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || stopped) return;
    if (ec) {
      int e = ec.value();
      bool exhausted = ec.category() == boost::system::system_category() &&
                       (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM);
      warn("Horovod store: cannot accept a connection: " + ec.message(),
           "Horovod store: cannot accept a connection: " + ec.message());
      if (!exhausted) return accept();
      accept_delay = std::clamp(accept_delay * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
      accept_backoff.expires_after(accept_delay);
      accept_backoff.async_wait([this, keep = shared_from_this()](const boost::system::error_code& tec) {
        if (!tec) accept();
      });
      return;
    }
    accept_delay = std::chrono::milliseconds(0);
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    boost::system::error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);
    std::make_shared<HttpSession>(shared_from_this(), std::move(sock))->start();
    accept();
  });
}

Result<std::unique_ptr<HorovodHttpServer>> HorovodHttpServer::listen(asio::io_context& io, HorovodHttpOptions options,
                                                                     Warn warn) {
  if (options.max_connections == 0) options.max_connections = 1;
  auto st = std::make_shared<State>(io, std::move(options), std::move(warn));
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(st->opts.bind_address, ec);
  if (ec) return make_error("Horovod store: bad listen address '" + st->opts.bind_address + "'");
  tcp::endpoint ep(addr, static_cast<unsigned short>(st->opts.port));
  st->acceptor.open(ep.protocol(), ec);
  if (!ec) st->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) st->acceptor.bind(ep, ec);
  if (!ec) st->acceptor.listen(4096, ec);
  if (ec)
    return make_error("Horovod store: cannot listen on " + st->opts.bind_address + ":" +
                      std::to_string(st->opts.port) + ": " + ec.message(), 3);
  ::fcntl(st->acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  st->port = st->acceptor.local_endpoint().port();
  // The first accept is started on the io thread (the io_context may be running already).
  asio::post(io, [st] { st->accept(); });
  return std::unique_ptr<HorovodHttpServer>(new HorovodHttpServer(std::move(st)));
}

HorovodHttpServer::HorovodHttpServer(std::shared_ptr<State> state) : state_(std::move(state)) {}

HorovodHttpServer::~HorovodHttpServer() {
  state_->stopped = true;
  boost::system::error_code ec;
  state_->acceptor.close(ec);
  state_->accept_backoff.cancel();
}

int HorovodHttpServer::port() const { return state_->port; }
int HorovodHttpServer::refused() const { return state_->refused; }

}  // namespace hvdrun::rdv
