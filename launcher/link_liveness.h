// Whether the far side of an hvdrun <-> agent link is still there, for both ends (hvdrun's
// RemoteHost::relay and the agent's control thread): it is gone once nothing has been heard
// from it for the heartbeat time-out (a network partition sends no FIN), unless hvdrun
// relayed a Ctrl-Z's SIGSTOP: until the SIGCONT after it, hvdrun itself is stopped and the
// silence is that stop, not a lost link (a job held longer than the time-out runs on after
// fg, as a local one does). Pure: the caller gives the time.
#pragma once

#include <chrono>

namespace hvdrun {

class LinkLiveness {
 public:
  using Clock = std::chrono::steady_clock;
  LinkLiveness(double timeout_s, Clock::time_point now) : timeout_(timeout_s), last_heard_(now) {}
  // Something came from the far side.
  void heard(Clock::time_point now) { last_heard_ = now; }
  // A signal relayed by hvdrun went over the link: SIGSTOP holds the count, SIGCONT
  // restarts it from now.
  void relayed(int sig, Clock::time_point now);
  bool held() const { return held_; }
  bool lost(Clock::time_point now) const { return !held_ && quiet_s(now) > timeout_; }
  // Seconds since the far side was last heard.
  double quiet_s(Clock::time_point now) const { return std::chrono::duration<double>(now - last_heard_).count(); }

 private:
  double timeout_;
  Clock::time_point last_heard_;
  bool held_ = false;
};

}  // namespace hvdrun
