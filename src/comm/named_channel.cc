#include "comm/named_channel.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/overlap.h"
#include "comm/context.h"

namespace kolo::detail {

namespace {

// A round's header, before the bitset: what this rank has pending.
struct Header {
  std::uint64_t pending;     // operations announced and not yet run
  std::uint64_t full_bytes;  // bytes of the names the table does not know (second allgatherv)
  std::uint64_t join_state;  // kJoined: in join() (set_joined); kLeaving: left, until every rank has
};
constexpr std::size_t kHeaderWords = sizeof(Header) / 8;
constexpr std::uint64_t kJoined = 1, kLeaving = 2;

void put(std::vector<char>& out, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  out.insert(out.end(), c, c + n);
}

// Entries of the second allgatherv: u32 name length, name, fingerprint.
void encode(std::vector<char>& out, const Announce& a) {
  const auto n = static_cast<std::uint32_t>(a.name.size());
  put(out, &n, sizeof n);
  put(out, a.name.data(), n);
  put(out, &a.fp, sizeof a.fp);
}

std::vector<Announce> decode(const char* p, std::size_t bytes, int rank) {
  std::vector<Announce> out;
  const char* end = p + bytes;
  while (p < end) {
    std::uint32_t n;
    if (end - p < static_cast<std::ptrdiff_t>(sizeof n)) fail("named negotiation: rank {} sent a truncated entry", rank);
    std::memcpy(&n, p, sizeof n);
    p += sizeof n;
    if (end - p < static_cast<std::ptrdiff_t>(n + sizeof(Fingerprint)))
      fail("named negotiation: rank {} sent a truncated entry", rank);
    Announce a;
    a.name.assign(p, n);
    p += n;
    std::memcpy(&a.fp, p, sizeof a.fp);
    p += sizeof a.fp;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

NamedChannel::NamedChannel(Context& c)
    : c_(c),
      hub_(std::make_shared<Hub>()),
      table_(static_cast<std::size_t>(config::named_cache_capacity())),
      cycle_(config::named_cycle_us()),
      stall_warn_ms_(config::stall_warn_ms()),
      timeout_ms_(config::timeout_ms()) {}

NamedChannel::~NamedChannel() {
  {
    std::lock_guard lk(hub_->mu);
    stop_ = true;
    // A round waits on peers that may never issue what is pending here.
    if (in_round_ && backend_) backend_->abort(rank_prefix() + "closed its communicator");
  }
  hub_->cv.notify_all();
  if (worker_.joinable()) worker_.join();
  std::string names;
  for (const auto& [name, op] : ops_) names += (names.empty() ? "'" : ", '") + name + "'";
  if (!names.empty())
    fail_all(std::make_exception_ptr(Error(rank_prefix() + "the communicator was closed while named operation(s) " +
                                           names + " were pending (not every rank had issued them)")));
}

std::shared_ptr<WorkState> NamedChannel::submit(const std::string& name, const Fingerprint& fp,
                                                std::function<void(collectives::Backend&, const Fingerprint&)> body) {
  auto state = std::make_shared<WorkState>();
  state->on_wait = [hub = std::weak_ptr<Hub>(hub_)] {
    if (auto h = hub.lock()) {
      {
        std::lock_guard lk(h->mu);
        h->release = true;
      }
      h->cv.notify_all();
    }
  };
  {
    std::lock_guard lk(hub_->mu);
    if (!broken_.empty())
      throw Error(rank_prefix() + "communicator is unusable after an earlier failure: " + broken_);
    auto it = ops_.find(name);
    if (it != ops_.end())
      fail_as<DuplicateNameError>("{} named '{}': an operation of that name ({}) is already in flight on this rank; "
                                  "wait for it before issuing the name again", fp.call(), name, it->second.fp.call());
    const auto now = Clock::now();
    Op op{fp, std::move(body), state, now, ++issued_, false, now};
    ops_.emplace(name, std::move(op));
    if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
  }
  hub_->cv.notify_all();
  return state;
}

void NamedChannel::set_joined(bool on) {
  std::unique_lock lk(hub_->mu);
  if (joined_ == on) return;
  joined_ = on;
  leaving_ = !on;
  announce_ = true;
  if (on && !worker_.joinable()) worker_ = std::thread([this] { loop(); });
  hub_->cv.notify_all();
  if (on) return;
  // Leaving is collective, as Horovod's join() is. A round samples each
  // rank's state when it starts, and may wait on its peers a while: a rank
  // that has left can still count as joined in a round in flight, and a named
  // allreduce a peer issues after leaving would run there with its zeros (its
  // own call of it then waiting for a twin that never comes). So a rank that
  // leaves says so in every round until one finds every rank leaving; that
  // round ends the leave on every rank at once, and every round after it
  // samples each rank after its leave.
  auto left = [&] { return !leaving_ || stop_ || !broken_.empty(); };
  if (timeout_ms_ <= 0) {
    hub_->cv.wait(lk, left);
  } else if (!hub_->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms_), left)) {
    std::string not_left;
    for (std::size_t r = 0; r < seen_leaving_.size(); ++r)
      if (!seen_leaving_[r]) not_left += (not_left.empty() ? "" : ", ") + c_.name(static_cast<int>(r));
    fail("{}leaving join: {} not left after {} ms (KOLO_TIMEOUT_MS); every rank leaves join together",
         rank_prefix(), not_left.empty() ? std::string("a rank") : not_left, timeout_ms_);
  }
}

void NamedChannel::abort(const std::string& reason) {
  std::lock_guard lk(hub_->mu);
  if (broken_.empty()) broken_ = reason;
  if (in_round_ && backend_) backend_->abort(reason);
  hub_->cv.notify_all();
}

void NamedChannel::loop() {
  overlaps_caller = true;  // its callers go on working (core/overlap.h)
  std::unique_lock lk(hub_->mu);
  auto last_round = Clock::now();
  for (;;) {
    // Until there is something to announce, or (something pending somewhere)
    // a cycle has passed since the last round.
    for (;;) {
      if (stop_) return;
      if (!broken_.empty()) {  // the ordered path failed: nothing pending here can complete
        const std::string why = broken_;
        lk.unlock();
        fail_all(std::make_exception_ptr(IoError(rank_prefix() + "communicator failed: " + why)));
        return;
      }
      const auto now = Clock::now();
      auto due = Clock::time_point::max();
      bool fresh = false;
      for (auto& [name, op] : ops_) {
        if (op.announced) continue;
        if (hub_->release || op.issued + cycle_ <= now) {
          op.announced = fresh = true;
        } else {
          due = std::min(due, op.issued + cycle_);
        }
      }
      hub_->release = false;
      fresh |= std::exchange(announce_, false);
      if (fresh || (anyone_pending_ && now >= last_round + cycle_)) break;
      if (anyone_pending_) due = std::min(due, last_round + cycle_);
      if (due == Clock::time_point::max()) {
        hub_->cv.wait(lk);
      } else {
        hub_->cv.wait_until(lk, due);
      }
    }
    std::vector<std::string> mine;
    std::vector<std::pair<std::uint64_t, std::string>> order;
    for (const auto& [name, op] : ops_)
      if (op.announced) order.emplace_back(op.order, name);
    std::sort(order.begin(), order.end());
    for (auto& [o, name] : order) mine.push_back(std::move(name));
    in_round_ = true;
    lk.unlock();
    std::exception_ptr err;
    bool first_hand = true;
    try {
      round(mine);
    } catch (const IoError&) {
      err = std::current_exception();
      first_hand = false;
    } catch (...) {
      err = std::current_exception();
    }
    last_round = Clock::now();
    lk.lock();
    in_round_ = false;
    if (!err) continue;
    // A failed round or operation: the peers may be anywhere, so the whole
    // communicator fails, as on the ordered path (comm/context.h).
    std::string msg;
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      msg = e.what();
    }
    if (!stop_) {
      lk.unlock();
      try {
        std::rethrow_exception(err);
      } catch (const Error& e) {
        msg = c_.report_failure(e, first_hand);
      } catch (...) {
      }
      if (backend_) backend_->abort(msg);
      c_.abort_ordered(msg);
      lk.lock();
    }
    if (broken_.empty()) broken_ = msg;
    lk.unlock();
    hub_->cv.notify_all();  // a set_joined(false) waiting for a round
    fail_all(first_hand ? std::make_exception_ptr(Error(msg)) : std::make_exception_ptr(IoError(msg)));
    return;
  }
}

// One round: announce, settle, run what every rank has issued. Runs on the
// channel's thread with the lock released; `mine` are this rank's announced
// names in issue order (their ops stay in ops_ until they complete).
void NamedChannel::round(std::vector<std::string>& mine) {
  if (!backend_) {
    std::unique_ptr<collectives::Backend> made;
    if (c_.size == 1 || !c_.make_backend) {  // one rank (a process set of one has no store)
      made = collectives::make_self_backend();
    } else {
      await_peers(mine);
      if (!store_)
        store_ = c_.store->connect_again(std::chrono::milliseconds(config::rendezvous_timeout_ms()),
                                         auth::Identity{c_.world_rank(c_.rank), 0, -1});
      made = c_.make_backend(*store_, c_.base_prefix + "/named");
    }
    std::lock_guard lk(hub_->mu);
    backend_ = std::move(made);
  }
  std::vector<Announce> full;
  std::vector<std::uint64_t> msg(kHeaderWords + table_.words(), 0);
  {
    std::lock_guard lk(hub_->mu);
    for (const auto& name : mine) {
      const Op& op = ops_.at(name);
      const int s = table_.slot(name);
      if (s >= 0 && same_call(table_.call(s), op.fp)) {
        msg[kHeaderWords + s / 64] |= std::uint64_t{1} << (s % 64);
      } else {
        full.push_back({name, op.fp});
      }
    }
  }
  std::vector<char> full_bytes;
  for (const auto& a : full) encode(full_bytes, a);
  std::uint64_t state;
  {
    std::lock_guard lk(hub_->mu);
    state = joined_ ? kJoined : leaving_ ? kLeaving : 0;
  }
  const Header h{mine.size(), full_bytes.size(), state};
  std::memcpy(msg.data(), &h, sizeof h);

  const std::size_t n = static_cast<std::size_t>(c_.size);
  const std::size_t bytes = msg.size() * 8;
  std::vector<std::uint64_t> all(msg.size() * n);
  Fingerprint fp = fingerprint(Kind::Allgather, DType::U8, bytes);
  fp.seq = ++seq_;
  backend_->begin(fp);
  backend_->allgatherv(msg.data(), all.data(), std::vector<std::size_t>(n, bytes), DType::U8);

  std::vector<RankRound> rounds(n);
  std::vector<std::size_t> full_counts(n);
  std::size_t full_total = 0;
  std::vector<bool> joined_ranks(n, false), leaving_ranks(n, false);
  bool anyone_joined = false, anyone_leaving = false, all_leaving = true;
  for (std::size_t r = 0; r < n; ++r) {
    Header hr;
    std::memcpy(&hr, &all[r * msg.size()], sizeof hr);
    joined_ranks[r] = hr.join_state == kJoined;
    anyone_joined |= joined_ranks[r];
    leaving_ranks[r] = hr.join_state == kLeaving;
    anyone_leaving |= leaving_ranks[r];
    all_leaving &= leaving_ranks[r];
    full_counts[r] = hr.full_bytes;
    full_total += hr.full_bytes;
    rounds[r].bits.assign(all.begin() + r * msg.size() + kHeaderWords, all.begin() + (r + 1) * msg.size());
  }
  if (full_total > 0) {
    std::vector<char> names(full_total);
    Fingerprint fpv = fingerprint_v(DType::U8, full_counts);
    fpv.seq = ++seq_;
    backend_->begin(fpv);
    backend_->allgatherv(full_bytes.data(), names.data(), full_counts, DType::U8);
    std::size_t at = 0;
    for (std::size_t r = 0; r < n; ++r) {
      rounds[r].full = decode(names.data() + at, full_counts[r], static_cast<int>(r));
      at += full_counts[r];
    }
  }
  const Settled s = table_.settle(rounds, joined_ranks);

  for (const auto& m : s.mismatched) {
    // The shapes' hashes only where nothing else differs.
    Fingerprint a = m.first_fp, b = m.second_fp;
    a.extra = b.extra = 0;
    const bool shape = same_call(a, b);
    complete(m.name, std::make_exception_ptr(Error(fmt::format(
        "{}named operation '{}': {} called {} while {} called {} (no data moved; the communicator remains usable)",
        rank_prefix(), m.name, c_.name(m.first), m.first_fp.call(shape), c_.name(m.second),
        m.second_fp.call(shape)))));
  }
  for (const auto& r : s.refused) {
    complete(r.name, std::make_exception_ptr(Error(fmt::format(
        "{}named {} '{}' cannot run while {} has joined: a joined rank takes part in allreduces only, as in "
        "Horovod (no data moved; the communicator remains usable)",
        rank_prefix(), r.call.call(), r.name, c_.name(r.joined)))));
  }
  for (const auto& r : s.ready) {
    Op* op = nullptr;
    {
      std::lock_guard lk(hub_->mu);
      auto it = ops_.find(r.name);  // std::map: stable while other names come and go
      if (it != ops_.end()) op = &it->second;
    }
    Fingerprint at = op != nullptr ? op->fp : r.call;
    at.seq = ++seq_;
    backend_->begin(at);
    if (op != nullptr) {
      op->body(*backend_, at);
      complete(r.name, nullptr);
    } else {  // joined (Horovod's join): this rank's part is zeros
      std::vector<char> zeros(r.call.count * dtype_size(r.call.dtype), 0);
      backend_->allreduce(zeros.data(), zeros.data(), r.call.count, r.call.dtype, r.call.op);
    }
  }
  {
    std::lock_guard lk(hub_->mu);
    // Every announced operation that did not run or fail is waiting.
    // Rounds go on while a rank is joined or leaving: the peers' threads take
    // part, and the leave ends.
    anyone_pending_ = anyone_joined || anyone_leaving || joined_ || leaving_ || !s.waiting.empty();
    if (leaving_) seen_leaving_ = leaving_ranks;  // names the laggards if the leave times out
    if (all_leaving) leaving_ = false;
  }
  if (all_leaving) hub_->cv.notify_all();  // set_joined(false) waits for this round
  check_stalls(s);
}

// The first named operation: every rank says so in the store before the
// channel's transport is built, so that its build never waits long inside
// the store client (which the ordered path shares) and a rank that issues
// none is named. Polled, so that closing the communicator stops it.
void NamedChannel::await_peers(const std::vector<std::string>& mine) {
  const std::string space = c_.base_prefix + "/named/here/";
  c_.store->set(space + std::to_string(c_.rank), "1");
  const auto start = Clock::now();
  auto warn_at = start + std::chrono::milliseconds(stall_warn_ms_);
  std::vector<bool> here(static_cast<std::size_t>(c_.size), false);
  for (auto pause = std::chrono::microseconds(200);; pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    std::string missing;
    for (int q = 0; q < c_.size; ++q) {
      if (!here[q]) here[q] = c_.store->check({space + std::to_string(q)});
      if (!here[q]) missing += (missing.empty() ? "" : ", ") + c_.name(q);
    }
    if (missing.empty()) return;
    std::string names;
    for (const auto& n : mine) names += (names.empty() ? "'" : ", '") + n + "'";
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
    if (timeout_ms_ > 0 && waited > timeout_ms_)
      fail("named operation(s) {} timed out after {} ms (KOLO_TIMEOUT_MS): {} issued no named operation", names,
           waited, missing);
    if (stall_warn_ms_ > 0 && now >= warn_at) {
      warn_at = now + std::chrono::milliseconds(stall_warn_ms_);
      log(LogLevel::Warn, "stall: named operation(s) {} issued here have waited {} ms for {}, which issued no named "
          "operation yet", names, waited, missing);
    }
    {
      std::unique_lock lk(hub_->mu);
      if (hub_->cv.wait_for(lk, pause, [&] { return stop_ || !broken_.empty(); }))
        fail_io("named operation(s) {}: the communicator was closed or failed while waiting for {}", names, missing);
    }
  }
}

std::string NamedChannel::describe_waiting(const Settled::Waiting& w) const {
  std::string have, missing;
  for (std::size_t r = 0; r < w.issued.size(); ++r) {
    std::string& to = w.issued[r] ? have : missing;
    to += (to.empty() ? "" : ", ") + c_.name(static_cast<int>(r));
  }
  return fmt::format("named operation '{}' has been issued by {} but not by {}", w.name, have, missing);
}

// A name this rank issued that some ranks have not: warn every stall period,
// fail the communicator past the timeout.
void NamedChannel::check_stalls(const Settled& s) {
  const auto now = Clock::now();
  for (const auto& w : s.waiting) {
    Op* op = nullptr;
    {
      std::lock_guard lk(hub_->mu);
      auto it = ops_.find(w.name);
      if (it != ops_.end()) op = &it->second;
    }
    if (op == nullptr) continue;
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - op->issued).count();
    if (timeout_ms_ > 0 && waited > timeout_ms_)
      fail("{} ({}): timed out after {} ms (KOLO_TIMEOUT_MS)", describe_waiting(w), op->fp.call(), waited);
    if (stall_warn_ms_ > 0 && now - op->warned >= std::chrono::milliseconds(stall_warn_ms_)) {
      op->warned = now;
      log(LogLevel::Warn, "stall: {} ({}); waited {} ms", describe_waiting(w), op->fp.call(), waited);
    }
  }
}

void NamedChannel::complete(const std::string& name, std::exception_ptr err) {
  std::shared_ptr<WorkState> state;
  {
    std::lock_guard lk(hub_->mu);
    auto it = ops_.find(name);
    if (it == ops_.end()) return;
    state = std::move(it->second.state);
    ops_.erase(it);
  }
  {
    std::lock_guard slk(state->mu);
    state->done = true;
    state->error = err;
  }
  state->cv.notify_all();
}

void NamedChannel::fail_all(std::exception_ptr err) {
  std::vector<std::string> names;
  {
    std::lock_guard lk(hub_->mu);
    for (const auto& [name, op] : ops_) names.push_back(name);
  }
  for (const auto& name : names) complete(name, err);
}

}  // namespace kolo::detail
