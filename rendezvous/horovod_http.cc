#include "rendezvous/horovod_http.h"

#include <fcntl.h>

#include <array>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/span_body.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <list>
#include <map>
#include <optional>
#include "common/log.h"

#include "common/deadline.h"
#include "common/strings.h"

namespace hvdrun::rdv {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

namespace {
constexpr size_t kHeaderLimit = 8192;
// What one connection buffers of what it reads at a time (the header, a piece of a body).
constexpr size_t kReadBuffer = 16384;
// Time to write an answer (to a client that does not read, or to a refused one).
constexpr auto kWriteTimeout = std::chrono::seconds(5);
// After answering: how long, and how much, of what a client still sends is read and dropped.
constexpr auto kLingerTime = std::chrono::seconds(1);
constexpr size_t kLingerBytes = 1u << 20;

std::string seconds_text(double s) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", s);
  return buf;
}
}  // namespace

// Not in the anonymous namespace: State (a member of HorovodHttpServer, so of external
// linkage) holds pointers to it, which GCC warns about (-Wsubobject-linkage) once this file
// is compiled inside another (the unity group of rendezvous/CMakeLists.txt).
class HttpSession;

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
  size_t open = 0;  // sessions counted against max_connections (io thread)
  // The sessions still reading their request, oldest first, and how many of each peer.
  std::list<HttpSession*> reading;
  std::map<asio::ip::address, size_t> reading_of;
  bool accept_paused = false;
  bool stopped = false;
  std::atomic<int> refused{0};
  int port = 0;

  void accept();
  void make_room(const asio::ip::address& peer);
  void make_room();
  void drop_oldest_reading(const asio::ip::address& peer, const std::string& why);
  void on_session_gone() {
    --open;
    if (accept_paused && !stopped && open < opts.max_connections) {
      accept_paused = false;
      accept();
    }
  }
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(std::shared_ptr<HorovodHttpServer::State> st, tcp::socket sock)
      : st_(std::move(st)), sock_(std::move(sock)), timer_(st_->io), accepted_(std::chrono::steady_clock::now()) {
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
  ~HttpSession() {
    stop_reading();
    if (counted_) st_->on_session_gone();
  }

  const asio::ip::address& peer() const { return peer_addr_; }

  void start() {
    if (peer_ == "?" || !st_->opts.allowed.allows(peer_addr_)) {
      st_->refused++;
      st_->warn("refused a Horovod store connection from a host outside the job",
                "Horovod store: refused a connection from " + peer_ + ": not a host of this job");
      return answer({403, "hvdrun's Horovod store answers only the hosts of its job\n", {}});
    }
    st_->make_room(peer_addr_);  // before this one counts: it is the newest
    reading_at_ = st_->reading.insert(st_->reading.end(), this);
    st_->reading_of[peer_addr_]++;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(st_->opts.limits.max_value_bytes);
    arm(std::min(st_->opts.header_timeout, st_->opts.request_timeout));
    http::async_read_header(sock_, buf_, *parser_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  // The server ends this connection (too many are reading): closed without an answer.
  void drop() {
    dropped_ = true;
    stop_reading();
    if (counted_) {
      counted_ = false;
      st_->on_session_gone();
    }
    close();
  }

 private:
  // The request must have arrived `seconds` after the connection was accepted.
  void arm(double seconds) {
    timer_.expires_at(accepted_ + seconds_to_duration(seconds));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->answering_ || self->dropped_) return;
      self->timed_out_ = true;
      boost::system::error_code ignored;
      self->sock_.cancel(ignored);
    });
  }

  void stop_reading() {
    if (!reading_at_) return;
    st_->reading.erase(*reading_at_);
    reading_at_.reset();
    if (auto it = st_->reading_of.find(peer_addr_); it != st_->reading_of.end() && --it->second == 0)
      st_->reading_of.erase(it);
  }

  // Errors common to reading the header and the body; true when one was answered.
  bool read_failed(boost::system::error_code ec, const char* what, double seconds) {
    if (timed_out_) {
      fail(408, std::string(what) + " not complete within " + seconds_text(seconds) + " s");
      return true;
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted) {
      close();  // the client went away without a (whole) request
      return true;
    }
    if (ec == http::error::body_limit) {
      fail(413, "value exceeds the limit of " + std::to_string(st_->opts.limits.max_value_bytes) + " bytes");
      return true;
    }
    if (ec == http::error::header_limit) {
      fail(431, "request header exceeds " + std::to_string(kHeaderLimit) + " bytes");
      return true;
    }
    if (ec) {
      fail(400, "malformed HTTP request: " + ec.message());
      return true;
    }
    return false;
  }

  void on_header(boost::system::error_code ec) {
    if (dropped_ || read_failed(ec, "request header", std::min(st_->opts.header_timeout, st_->opts.request_timeout)))
      return;
    auto& req = parser_->get();
    std::string method(req.method_string());
    std::string target(req.target());
    if (size_t hosts = req.count(http::field::host); hosts > 1)
      return fail(400, std::to_string(hosts) + " Host headers: expected one");
    if (auto host = req[http::field::host]; !store_host_header_ok(std::string_view(host.data(), host.size())))
      return fail(400, "Host '" + printable(std::string_view(host.data(), host.size()), 64) +
                           "': expected the store's IP address (a host name is refused: DNS rebinding)");
    if (req.chunked())
      return fail(411, printable(method, 16) + " " + printable(target, 64) +
                           " with a chunked body: expected Content-Length (as Horovod's client sends)");
    if (method == "PUT" && !req.has_content_length())
      return fail(411, "PUT " + printable(target, 64) + " without Content-Length");
    Admission a = st_->store.admit(method, target, parser_->content_length().value_or(0));
    if (!a.ok()) return refuse(method, std::move(a.refusal));
    charge_ = std::move(a.charge);
    if (parser_->is_done()) return on_read({});
    arm(st_->opts.request_timeout);
    http::async_read(sock_, buf_, *parser_, [self = shared_from_this()](boost::system::error_code ec2, size_t) {
      self->on_read(ec2);
    });
  }

  void on_read(boost::system::error_code ec) {
    if (dropped_ || read_failed(ec, "request", st_->opts.request_timeout)) return;
    auto& req = parser_->get();
    std::string method(req.method_string());
    std::string_view target(req.target().data(), req.target().size());
    HttpAnswer a = st_->store.handle(method, target, std::move(req.body()), std::move(charge_));
    if (a.status != 200 && a.status != 404) return refuse(method, std::move(a));
    answer(std::move(a));
  }

  void refuse(const std::string& method, HttpAnswer a) {
    st_->refused++;
    std::string msg = a.text;
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    st_->warn("Horovod store: " + std::to_string(a.status), "Horovod store: " + printable(method, 16) + " from " +
                                                                peer_ + ": " + std::to_string(a.status) + " " + msg);
    answer(std::move(a));
  }

  void fail(int status, const std::string& why) {
    st_->refused++;
    st_->warn("Horovod store: " + std::to_string(status), "Horovod store: request from " + peer_ + ": " +
                                                              std::to_string(status) + " " + why);
    answer({status, why + "\n", {}});
  }

  // The answer's body is the stored value itself (shared, not copied) or the error's text.
  void answer(HttpAnswer a) {
    stop_reading();
    answering_ = true;
    answer_ = std::move(a);
    res_.emplace();
    res_->version(11);
    res_->result(static_cast<unsigned>(answer_.status));
    res_->set(http::field::server, "hvdrun");
    res_->set(http::field::connection, "close");
    if (answer_.status == 405) res_->set(http::field::allow, "GET, PUT, DELETE");
    res_->set(http::field::content_type, answer_.status == 200 ? "application/octet-stream" : "text/plain");
    std::string_view body = answer_.body();
    res_->body() = {body.data(), body.size()};
    res_->prepare_payload();  // Content-Length (Horovod's client reads up to it)
    res_->keep_alive(false);
    timer_.expires_after(kWriteTimeout);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      boost::system::error_code ignored;
      self->sock_.close(ignored);
    });
    http::async_write(sock_, *res_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
      self->answer_ = {};  // the value is sent: the store alone holds it now
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
  std::chrono::steady_clock::time_point accepted_;
  asio::ip::address peer_addr_;
  std::string peer_;
  std::optional<std::list<HttpSession*>::iterator> reading_at_;
  boost::beast::flat_buffer buf_{kReadBuffer};
  std::optional<http::request_parser<http::string_body>> parser_;
  Charge charge_;  // the room taken for the request's body
  HttpAnswer answer_;
  std::optional<http::response<http::span_body<const char>>> res_;
  std::unique_ptr<std::array<char, 4096>> drain_buf_;
  size_t drained_ = 0;
  bool timed_out_ = false, answering_ = false, dropped_ = false, counted_ = true;
};

// Room for a new connection. One client that opens connections and sends nothing (or
// slowly) must not keep the job's workers, whose requests arrive at once, waiting: when a
// new connection from `peer` makes more of its connections reading a request than
// allowed, the oldest of them goes; when the connections open reach the cap, the oldest
// still reading of the peer with most reading goes.
void HorovodHttpServer::State::make_room(const asio::ip::address& peer) {
  if (auto it = reading_of.find(peer); it != reading_of.end() && it->second >= opts.max_reading_per_peer)
    drop_oldest_reading(peer, std::to_string(it->second) + " of its connections were reading a request, the limit");
}

void HorovodHttpServer::State::make_room() {
  if (open < opts.max_connections || reading_of.empty()) return;
  auto most = std::max_element(reading_of.begin(), reading_of.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  drop_oldest_reading(most->first, std::to_string(opts.max_connections) + " connections were open, the limit");
}

void HorovodHttpServer::State::drop_oldest_reading(const asio::ip::address& peer, const std::string& why) {
  auto it = std::find_if(reading.begin(), reading.end(), [&](HttpSession* s) { return s->peer() == peer; });
  if (it == reading.end()) return;
  refused++;
  warn("Horovod store: dropped an idle connection",
       "Horovod store: closed the oldest connection from " + peer.to_string() +
           " still reading its request: a new one came when " + why);
  (*it)->drop();
}

void HorovodHttpServer::State::accept() {
  if (stopped) return;
  if (open >= opts.max_connections && reading.empty()) {
    accept_paused = true;  // all are answering: the next ones wait in the backlog until one ends
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
    make_room();
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
  if (options.max_reading_per_peer == 0) options.max_reading_per_peer = 1;
  auto st = std::make_shared<State>(io, std::move(options), std::move(warn));
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(st->opts.bind_address, ec);
  if (ec) return make_error(ErrorKind::kInvalidArgument,
                            "Horovod store: bad listen address '" + st->opts.bind_address + "'");
  tcp::endpoint ep(addr, static_cast<unsigned short>(st->opts.port));
  st->acceptor.open(ep.protocol(), ec);
  if (!ec) st->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) st->acceptor.bind(ep, ec);
  if (!ec) st->acceptor.listen(4096, ec);
  if (ec)
    return make_error(ErrorKind::kLaunchFailed, "Horovod store: cannot listen on " + st->opts.bind_address + ":" +
                                                     std::to_string(st->opts.port) + ": " + ec.message());
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
