// The rendezvous server's insides, shared by server.cc (the server: accepting, the key-value
// store, registration rounds, the start time-out) and session.cc (one connection: the
// handshake, frames in and out, one handler per request type). Internal to hvdrun_rendezvous.
#pragma once

#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <memory>
#include <set>
#include "common/log.h"
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log_limiter.h"
#include "common/strings.h"
#include "rendezvous/horovod_http.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"

namespace hvdrun::rdv {

namespace asio = boost::asio;
using asio::ip::tcp;

// A session stops reading requests while this much of its answers is unsent (a client that
// pipelines gets and never reads cannot grow hvdrun).
constexpr size_t kMaxOutboxBytes = 8u << 20;
// A session's read buffer goes back to this size after a large frame.
constexpr size_t kInbufBytes = 8192;
// What a fatal message may bring to hvdrun's terminal.
constexpr size_t kMaxFatalMessage = 4096;

inline std::string quoted(std::string_view s) { return "'" + printable(s, 64) + "'"; }

class Session;

struct Waiter {
  std::shared_ptr<Session> session;
  std::set<std::string> missing;
  std::unique_ptr<asio::steady_timer> timer;
  bool done = false;
};

struct Server::Impl {
  ServerOptions opts;
  ServerCallbacks cbs;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer start_timer{io};
  bool start_timer_idle = false;
  bool start_timer_begun = false;  // begin_start_timer was called
  std::string address;
  int port = 0;
  std::thread thread;

  // Job state (io thread only).
  std::vector<PeerInfo> peers;            // index = rank; rank == -1 until registered
  std::vector<std::shared_ptr<Session>> pending_register;
  // Registrations per rank: a rank that called hvd_shutdown and hvd_init again registers
  // once more (its earlier connection closed); round k completes when every rank has
  // registered k times, and its sessions then get their neighbours.
  std::vector<int> reg_count;
  std::vector<std::weak_ptr<Session>> owner;
  std::unordered_map<std::string, std::string> kv;
  std::unordered_multimap<std::string, std::shared_ptr<Waiter>> waiters;
  std::set<std::shared_ptr<Session>> sessions;

  size_t store_bytes = 0;  // keys + values + kStoreEntryOverhead each
  LogLimiter log_limiter;
  asio::steady_timer log_flush_timer{io};
  asio::steady_timer accept_backoff{io};
  std::chrono::milliseconds accept_delay{0};

  // hvdrun --horovod (after `io`: destroyed before it).
  std::unique_ptr<HorovodHttpServer> horovod;

  std::atomic<int> elastic_round{0};  // begin_round's; 0: not an elastic job
  std::atomic<int> registered{0};
  std::atomic<int> rejected{0};
  std::atomic<int> open_waits{0};  // waits and barriers not answered yet

  void accept();
  void on_accept_error(const boost::system::error_code& ec);
  void arm_log_flush();
  // A warning, rate-limited per kind (the message without the peer).
  void warn(const std::string& kind, const std::string& line) {
    // Keys and host names come from workers: their bytes never reach the terminal raw.
    log_limiter.log(printable(kind, 256, true), printable(line, 1024, true), LogLimiter::Clock::now(),
                    [](const std::string& l) { spdlog::warn("rendezvous: {}", l); });
  }
  // Stores key = value within the store's bounds; an error names the bound.
  Status store(const std::string& key, std::string value);
  void begin_round(int round, std::vector<ExpectedRank> ranks);
  void on_registered();
  void on_reregistered(int round);
  void arm_start_timer();
  void on_start_timer();
  bool complete() const { return registered == static_cast<int>(peers.size()); }
  void notify_key(const std::string& key);
  void drop_waiter(const std::shared_ptr<Waiter>& w);
  std::string endpoint() const { return address + ":" + std::to_string(port); }
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& srv, tcp::socket sock) : srv_(srv), sock_(std::move(sock)), deadline_(srv.io) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void start();

  void waits_done(size_t n = 1) { pending_waits_ -= std::min(pending_waits_, n); }

  void send(MsgType type, std::string_view payload);

  // Sends an error frame, then closes once it is written.
  void fail(const std::string& message);
  void close();

  bool closed() const { return closed_; }
  int rank() const { return rank_; }
  int round() const { return round_; }
  int elastic_round() const { return elastic_round_; }
  // Elastic: its registration is for a round that is over: it may register again.
  void tell_stale_round();

 private:
  enum class State { kHello, kAuth, kReady };

  // Refuses an unauthenticated or misbehaving connection: counted, logged, closed at once.
  void reject(const std::string& why);

  // Reads whatever has arrived into inbuf_ and handles every complete frame in it: one
  // read for several frames, and for a frame's header and body together.
  void read_more();

  // Handles the frames read so far, then reads more, unless the answers pile up unsent
  // (then write_next() resumes once they are written).
  void pump();

  bool backlogged() const { return outbox_bytes_ > kMaxOutboxBytes; }

  // Returns true to keep reading.
  bool parse_frames();
  void on_eof();
  void protocol_error(const std::string& message);

  // Returns true to keep reading.
  bool handle(const Frame& f);

  // One handler per request type; returns true to keep reading.
  bool request(const Frame& f);
  bool on_register(const Frame& f);
  // The elastic round checks of a register; false when it was answered (stale or refused).
  bool register_in_round(const RegisterRequest& q, bool& keep_reading);
  // Whether this connection's rank is one of the current round's (its reports count).
  bool current() const { return rank_ >= 0 && elastic_round_ == srv_.elastic_round; }
  int reported_rank() const { return current() ? rank_ : -1; }  // -1: a worker of no current rank
  bool on_get_peer(const Frame& f);
  bool on_set(const Frame& f);
  void tell_elastic_commit(const std::string& key, const std::string& value);
  bool on_get(const Frame& f);
  bool on_add(const Frame& f);
  bool on_wait(const Frame& f);
  bool on_barrier(const Frame& f);
  bool on_fatal(const Frame& f);

  // Answers ok once every key exists, or timeout (with the missing keys) after `timeout_ms`.
  bool park(const std::vector<std::string>& keys, uint32_t timeout_ms);
  void write_next();
  Server::Impl& srv_;
  tcp::socket sock_;
  asio::steady_timer deadline_;
  std::string peer_;
  State state_ = State::kHello;
  std::vector<char> inbuf_;
  size_t inlen_ = 0;
  std::string client_nonce_, server_nonce_;
  std::deque<std::string> outbox_;
  size_t outbox_bytes_ = 0;
  size_t pending_waits_ = 0;
  std::vector<std::weak_ptr<Waiter>> waits_;  // this connection's waits and barriers
  bool read_paused_ = false;
  bool closing_ = false, closed_ = false;
  int rank_ = -1;
  int round_ = 0;
  int elastic_round_ = 0;  // the elastic round it registered in (0: none)
  bool finalized_ = false;  // this rank said it is done (hvd_shutdown)
};

}  // namespace hvdrun::rdv
