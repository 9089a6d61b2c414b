// The intruder of the security job tests. While a job waits for its last
// rank (secure_rank's SECURE_GO_FILE), it knocks on the job's store and on
// every waiting rank's data listener the ways a stranger would, and checks
// that each knock is turned away:
//   kolo_poke STORE_HOST:PORT SECRET SIZE LAST_RANK
// SECRET is the job's (the test's harness knows it): with it the tool finds
// the data listeners in the store, and lets the ranks below LAST_RANK get
// through init's host exchange (it publishes LAST_RANK's host entry for it,
// exactly what that rank will publish itself), so that they sit in the
// mesh's accept loop while it knocks. Prints "ok: ..." or "FAILED: ..." per
// knock; exits 1 if any failed. Silent connections stay open until it exits.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "net/auth.h"
#include "rendezvous/settings_check.h"
#include "rendezvous/store.h"
#include "net/socket.h"

namespace {

using namespace std::chrono_literals;
using kolo::net::Fd;
namespace auth = kolo::auth;

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

// Retries for a while: the store starts with rank 0.
Fd connect(const std::string& host, int port) {
  std::string why;
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    Fd fd = kolo::net::try_connect(host, port, 5000ms, &why);
    if (fd.valid()) return fd;
    if (std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "kolo_poke: cannot connect to %s:%d: %s\n", host.c_str(), port, why.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(50ms);
  }
}

// Reads until the peer closes (true) or 5 s pass (false); skips what it sends.
bool closed_by_peer(int fd) {
  char buf[256];
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    if (::recv(fd, buf, sizeof buf, 0) <= 0) return true;
  }
  return false;
}

bool read_challenge(int fd, auth::Challenge& ch) {
  std::size_t got = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (got < ch.size() && std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    const ssize_t n = ::recv(fd, ch.data() + got, ch.size() - got, 0);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return got == ch.size();
}

void send(int fd, const std::string& bytes) {
  [[maybe_unused]] ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

std::string length_prefix(std::uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s;
}

const char* status_name(auth::Outcome::Status s) {
  switch (s) {
    case auth::Outcome::Accepted: return "accepted";
    case auth::Outcome::Rejected: return "rejected";
    case auth::Outcome::Forged: return "forged";
    case auth::Outcome::NotKolo: return "not kolo";
    case auth::Outcome::WrongPeer: return "wrong peer";
    case auth::Outcome::Closed: return "closed";
    case auth::Outcome::TimedOut: return "timed out";
    case auth::Outcome::IoFailed: return "i/o failed";
  }
  return "?";
}

// The knocks every listener gets: garbage, a wrong MAC, (with the right key)
// a bogus identity, a huge length prefix where the handshake belongs.
void knock(const std::string& what, const std::string& host, int port, auth::Channel channel,
           auth::Identity claim, const auth::Key& job_key, std::vector<Fd>& silent) {
  {
    Fd fd = connect(host, port);
    auth::Challenge ch;
    const bool got = read_challenge(fd.get(), ch);
    std::string why;
    const auto parsed = got ? auth::parse_challenge(ch.data(), ch.size(), &why) : std::nullopt;
    check(parsed.has_value(), what + ": sends a kolo challenge first" + (got ? " " + why : ""));
    if (parsed && parsed->open)
      check(false, what + " checks no secret: it was started without the job's key "
                   "(kolorun must pass the job's key to its StoreServer)");
    send(fd.get(), "GET / HTTP/1.1\r\nHost: intruder\r\n\r\n");
    check(closed_by_peer(fd.get()), what + ": garbage is rejected");
  }
  {
    Fd fd = connect(host, port);
    const auth::Key wrong = auth::Key::from_secret("not the job's secret");
    const auth::Outcome o = auth::connect_handshake(fd.get(), wrong, channel, claim, std::chrono::steady_clock::now() + 10s);
    check(o.status == auth::Outcome::Rejected,
          fmt::format("{}: a wrong MAC is rejected (got: {} {})", what, status_name(o.status), o.detail));
  }
  if (channel == auth::Channel::Data) {
    Fd fd = connect(host, port);
    auth::Identity bogus = claim;
    bogus.rank = claim.size + 5;
    const auth::Outcome o = auth::connect_handshake(fd.get(), job_key, channel, bogus, std::chrono::steady_clock::now() + 10s);
    check(o.status == auth::Outcome::Rejected,
          fmt::format("{}: the job's key with a rank the job does not have is rejected (got: {})", what,
                      status_name(o.status)));
  }
  {
    Fd fd = connect(host, port);
    send(fd.get(), length_prefix(std::uint64_t(1) << 40));
    check(closed_by_peer(fd.get()), what + ": a 2^40 length prefix before authentication is rejected");
  }
  silent.push_back(connect(host, port));
}

std::string host_identity() {
  const char* name = std::getenv("KOLO_HOSTNAME");
  std::string host = name && *name ? name : "";
  if (host.empty()) {
    char buf[256] = {};
    ::gethostname(buf, sizeof buf - 1);
    host = buf;
  }
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  // The host record of rendezvous/hosts.cc: name, boot id, /dev/shm token
  // (one nobody can open: the last rank then has a host of its own), route.
  return host + "\n" + boot_id + "\n/kolo-poke-no-such-token\n127.0.0.1";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: kolo_poke STORE_HOST:PORT SECRET SIZE LAST_RANK\n");
    return 2;
  }
  const std::string addr = argv[1];
  const std::string host = addr.substr(0, addr.rfind(':'));
  const int port = std::atoi(addr.substr(addr.rfind(':') + 1).c_str());
  const auth::Key key = auth::Key::from_secret(argv[2]);
  const int size = std::atoi(argv[3]);
  const int last = std::atoi(argv[4]);
  std::vector<Fd> silent;

  knock("store " + addr, host, port, auth::Channel::Store, {1, size, -1}, key, silent);
  {
    Fd fd = connect(host, port);
    const auth::Outcome o = auth::connect_handshake(fd.get(), key, auth::Channel::Store, {}, std::chrono::steady_clock::now() + 10s);
    check(o.status == auth::Outcome::Accepted && !o.open, "store: the job's key is accepted and the store proves it back");
    send(fd.get(), length_prefix(std::uint64_t(1) << 40) + "body");
    check(closed_by_peer(fd.get()), "store: a 2^40 length prefix after authentication is rejected");
  }

  try {
    kolo::rdv::StoreClient store(host, port, 10000ms, key);
    // init()'s host exchange (rendezvous/hosts.cc): the waiting ranks go on
    // to build the mesh once every rank's host entries exist.
    store.set(fmt::format("kolo/comm0/host/{}", last), host_identity());
    store.set(fmt::format("kolo/comm0/hostof/{}", last), std::to_string(last));
    // ... and the settings comparison (rendezvous/settings_check.h): this
    // process has the job's environment, so the last rank's settings.
    kolo::rdv::publish_settings(store, "kolo/comm0", last);
    for (int r = 0; r < last; ++r) {
      const std::string a = store.get(fmt::format("kolo/comm0/addr/{}", r), 60000ms);
      knock(fmt::format("rank {} data listener {}", r, a), a.substr(0, a.rfind(':')),
            std::atoi(a.substr(a.rfind(':') + 1).c_str()), auth::Channel::Data, {last, size, r}, key, silent);
    }
  } catch (const std::exception& e) {
    check(false, fmt::format("finding the data listeners: {}", e.what()));
  }
  return failures == 0 ? 0 : 1;
}
