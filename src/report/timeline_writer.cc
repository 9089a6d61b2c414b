// The timeline's file.
//
// Design, and why:
// - Each rank writes a snapshot of its own events to `path`.rank<R>.json,
//   every KOLO_TIMELINE_FLUSH_MS, as a complete JSON file written to a
//   temporary name and renamed over the old one: whatever kills the job, each
//   rank leaves a file that parses (rename is atomic), never a torn one. The
//   writer waits longer between snapshots when a rewrite takes more than 2 %
//   of the interval, so a long job's growing file does not eat its time.
// - At the end (stop(), or the communicator going) every rank hands its
//   events to rank 0 through the rendezvous store — the only channel every
//   rank has on every host, with no shared file system assumed — and rank 0
//   writes the one file of the job at `path` (again temporary + rename), then
//   the snapshots are removed. A killed job leaves the snapshots;
//   `kolo-trace merge path` makes the one file from them.
// - Clocks: each rank measures the offset of its steady clock to the store
//   host's clock at start (the sample with the shortest round trip of 16;
//   error under half of it, ~10-50 us here), and writes aligned timestamps,
//   so the snapshots merge by concatenation.
// - The straggler of a collective (the rank whose arrival every other rank
//   waited for) needs every rank's arrival, so it is found at the merge: each
//   rank also sends one line per collective (communicator, position, start,
//   end), and each rank that arrived earlier gets a "wait for rank L" span
//   inside its collective (report/stragglers.h). kolo-trace does the same
//   from snapshots.
#include "report/timeline_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "comm/context.h"
#include "report/stragglers.h"
#include "report/trace_file.h"
#include "timeline/recorder.h"

namespace kolo::detail::timeline {

namespace {

bool reduces(Kind k) { return k == Kind::Allreduce || k == Kind::ReduceScatter; }

constexpr std::size_t kStoreChunk = 16 << 20;  // below the store's 64 MiB frame limit

struct Session {
  std::string path;  // the job's file (rank 0 writes it)
  std::string part;  // this rank's snapshot
  Context* ctx = nullptr;
  int rank = 0, size = 1, pid = 0;  // pid: world rank, the trace's process
  std::string keys;                 // this session's store key space
  std::unique_ptr<rdv::StoreClient> store;
  std::int64_t offset = 0;  // steady clock + offset = the store host's clock (ns)

  std::mutex mu;       // the fields below
  std::string events;  // this rank's events as JSON, each followed by ",\n"
  std::string table;   // one line per collective, for the straggler pass
  std::map<std::string, int> comm_tids;
  std::set<int> named_threads;
  std::uint64_t async_ids = 0;

  std::mutex wake_mu;
  std::condition_variable wake;
  bool stopping = false;
  std::thread snapshots;

  std::string us(std::int64_t t) const { return fmt::format("{:.3f}", (t + offset) / 1000.0); }

  void name_thread(int tid, const std::string& name, int sort) {
    if (!named_threads.insert(tid).second) return;
    events += fmt::format(
        "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {0}, \"tid\": {1}, \"args\": {{\"name\": {2}}}}},\n"
        "{{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": {0}, \"tid\": {1}, \"args\": {{\"sort_index\": {3}}}}},\n",
        pid, tid, json_string(name), sort);
  }

  void add_collective(const Event& e) {
    auto [it, fresh] = comm_tids.try_emplace(e.comm->key, static_cast<int>(comm_tids.size()) + 1);
    const int tid = it->second;
    name_thread(tid, "collectives " + e.comm->key, tid);
    std::string name = kind_name(e.fp.kind);
    if (!e.name.empty()) name += " " + e.name;
    std::string args = fmt::format("\"comm\": {}, \"seq\": {}, \"dtype\": \"{}\", \"count\": {}, \"bytes\": {}",
                                   json_string(e.comm->key), e.fp.seq, dtype_name(e.fp.dtype), e.fp.count, e.bytes);
    if (reduces(e.fp.kind)) args += fmt::format(", \"op\": \"{}\"", op_name(e.fp.op));
    if (e.fp.root >= 0) args += fmt::format(", \"root\": {}", e.fp.root);
    if (e.transport) args += fmt::format(", \"transport\": \"{}\"", e.transport);
    if (e.algorithm) args += fmt::format(", \"algorithm\": \"{}\"", e.algorithm);
    if (!e.name.empty()) args += ", \"name\": " + json_string(e.name);
    if (e.comm->world.size() > 1 && e.comm->key != "kolo/comm0")
      args += fmt::format(", \"world_ranks\": [{}]", fmt::join(e.comm->world, ", "));
    args += fmt::format(", \"queued_us\": {:.3f}, \"reduce_us\": {:.3f}, \"move_us\": {:.3f}",
                        (e.begin - e.submit) / 1000.0, e.reduce / 1000.0,
                        std::max<std::int64_t>(0, e.end - e.begin - e.reduce) / 1000.0);
    if (e.failed) args += ", \"failed\": true";
    events += fmt::format(
        "{{\"ph\": \"X\", \"cat\": \"collective\", \"name\": {}, \"pid\": {}, \"tid\": {}, \"ts\": {}, \"dur\": {:.3f}, "
        "\"args\": {{{}}}}},\n",
        json_string(name), pid, tid, us(e.begin), (e.end - e.begin) / 1000.0, args);
    // Queued ops overlap each other: async slices, which get lanes of their own.
    if (e.begin - e.submit >= 1000) {
      const std::uint64_t id = ++async_ids;
      events += fmt::format(
          "{{\"ph\": \"b\", \"cat\": \"queued\", \"name\": {0}, \"id\": \"r{1}.{2}\", \"pid\": {1}, \"tid\": {3}, \"ts\": {4}, "
          "\"args\": {{\"seq\": {6}}}}},\n"
          "{{\"ph\": \"e\", \"cat\": \"queued\", \"name\": {0}, \"id\": \"r{1}.{2}\", \"pid\": {1}, \"tid\": {3}, \"ts\": {5}}},\n",
          json_string("queued " + name), pid, id, tid, us(e.submit), us(e.begin), e.fp.seq);
    }
    table += fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", e.comm->key, e.fp.seq, e.begin + offset, e.end + offset, pid, tid);
  }

  void add_span(const Event& e) {
    const int tid = 1000 + e.thread;
    name_thread(tid, fmt::format("thread {}", e.thread), tid);
    // Async slices: a caller's spans (buckets in flight) may overlap.
    const std::uint64_t id = ++async_ids;
    events += fmt::format(
        "{{\"ph\": \"b\", \"cat\": {0}, \"name\": {1}, \"id\": \"r{2}.{3}\", \"pid\": {2}, \"tid\": {4}, \"ts\": {5}, "
        "\"args\": {{{7}}}}},\n"
        "{{\"ph\": \"e\", \"cat\": {0}, \"name\": {1}, \"id\": \"r{2}.{3}\", \"pid\": {2}, \"tid\": {4}, \"ts\": {6}}},\n",
        json_string(e.category), json_string(e.name), pid, id, tid, us(e.begin), us(std::max(e.begin, e.end)), e.args);
  }

  // Takes the recorded events into `events`; caller holds mu.
  void collect() {
    std::vector<Event> got;
    take_events(got);
    for (const Event& e : got) {
      if (e.comm)
        add_collective(e);
      else
        add_span(e);
    }
  }

  void snapshot() { write_whole(part, trace_file(events)); }

  void snapshot_loop() {
    const auto base = std::chrono::milliseconds(std::max<std::int64_t>(1, config::timeline_flush_ms()));
    auto interval = base;
    bool warned = false;
    std::unique_lock lk(wake_mu);
    while (!stopping) {
      wake.wait_for(lk, interval, [&] { return stopping; });
      if (stopping) break;
      lk.unlock();
      const std::int64_t t0 = now();
      try {
        std::lock_guard g(mu);
        collect();
        snapshot();
      } catch (const std::exception& e) {
        if (!warned) log(LogLevel::Warn, "{}", e.what());
        warned = true;
      }
      const auto took = std::chrono::nanoseconds(now() - t0);
      interval = std::max<std::chrono::milliseconds>(base, std::chrono::duration_cast<std::chrono::milliseconds>(took * 50));
      lk.lock();
    }
  }

  void put_big(const std::string& key, const std::string& value) {
    std::size_t parts = 0;
    for (std::size_t at = 0; at < value.size() || at == 0; at += kStoreChunk)
      store->set(fmt::format("{}/{}", key, parts++), value.substr(at, kStoreChunk));
    store->set(key, std::to_string(parts));
  }
  std::string get_big(const std::string& key, rdv::Millis timeout) {
    const std::size_t parts = std::stoul(store->get(key, timeout));
    std::string value;
    for (std::size_t i = 0; i < parts; ++i) {
      const std::string k = fmt::format("{}/{}", key, i);
      value += store->get(k, rdv::Millis(10000));
      store->set(k, "");  // the store keeps every key: give the memory back
    }
    return value;
  }

  void merge();
};

// How long a merge after a failed collective waits for a rank's events (ms).
constexpr std::int64_t kFailedMergeMs = 2000;

void Session::merge() {
  if (!store) {  // one rank
    write_whole(path, trace_file(events));
    ::unlink(part.c_str());
    return;
  }
  rdv::Millis timeout(std::max<std::int64_t>(1, config::timeline_merge_timeout_ms()));
  // After a failed collective some ranks may be dead (an elastic job then
  // re-forms and must not wait a minute here): wait briefly for their events.
  // The others wait twice as long for rank 0's verdict, so that they see it.
  const bool failed = ctx->engine.broken();
  if (failed) timeout = std::min(timeout, rdv::Millis(kFailedMergeMs * (rank == 0 ? 1 : 2)));
  if (rank != 0) {
    put_big(fmt::format("{}/events/{}", keys, rank), events);
    put_big(fmt::format("{}/table/{}", keys, rank), table);
    try {
      if (store->get(keys + "/written", timeout) == "ok") ::unlink(part.c_str());
    } catch (const Error&) {
      if (!failed) throw;  // rank 0 is gone too: this rank's snapshot file stays
    }
    store->set(fmt::format("{}/done/{}", keys, rank), "1");
    return;
  }
  std::string all = events, tables = table, missing;
  std::vector<std::string> done;  // of the ranks that sent their events
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int r = 1; r < size; ++r) {
    try {
      const auto left = std::max(rdv::Millis(1), std::chrono::duration_cast<rdv::Millis>(deadline - std::chrono::steady_clock::now()));
      all += get_big(fmt::format("{}/events/{}", keys, r), left);
      tables += get_big(fmt::format("{}/table/{}", keys, r), rdv::Millis(10000));
      done.push_back(fmt::format("{}/done/{}", keys, r));
    } catch (const Error&) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(ctx->world_rank(r));
    }
  }
  all += straggler_spans(tables);
  if (!missing.empty()) {
    log(LogLevel::Warn, "timeline: no events from rank(s) {} within {} ms; {} has the others'", missing,
        timeout.count(), path);
    all += fmt::format("{{\"ph\": \"M\", \"name\": \"process_labels\", \"pid\": {}, \"args\": {{\"labels\": "
                       "\"ranks missing from this trace: {}\"}}}},\n", pid, missing);
  }
  write_whole(path, trace_file(std::move(all)));
  ::unlink(part.c_str());
  store->set(keys + "/written", "ok");
  // The store may live in this process (rank 0 hosts it outside kolorun):
  // let the others read the verdict before it goes.
  try {
    store->wait(done, rdv::Millis(5000));
  } catch (const Error&) {
  }
}

std::mutex session_mu;  // guards `session`
std::unique_ptr<Session> session;
int sessions = 0;  // started in this process: names each one's store keys

}  // namespace

void open_session(Context& c, const std::string& path) {
  std::lock_guard lk(session_mu);
  if (session) fail("timeline: already recording to {}; stop it before starting another", session->path);
  if (path.empty()) fail("timeline: the file name is empty");
  auto s = std::make_unique<Session>();
  s->path = path;
  s->ctx = &c;
  s->rank = c.rank;
  s->size = c.size;
  s->pid = c.world_rank(c.rank);
  s->part = fmt::format("{}.rank{}.json", path, s->pid);
  s->keys = fmt::format("{}/timeline/{}", c.base_prefix.empty() ? c.prefix : c.base_prefix, sessions++);
  s->events = fmt::format(
      "{{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": {0}, \"args\": {{\"name\": \"rank {0}\"}}}},\n"
      "{{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": {0}, \"args\": {{\"sort_index\": {0}}}}},\n",
      s->pid);
  // Both files are tried now, so that a path that cannot be written is an
  // error at start naming it, not a lost trace at the end.
  s->snapshot();
  if (s->rank == 0)  // replaced by the merged file at the end
    write_whole(path, trace_file(fmt::format(
                          "{}{{\"ph\": \"M\", \"name\": \"process_labels\", \"pid\": {}, \"args\": {{\"labels\": "
                          "{}}}}}",
                          s->events, s->pid,
                          json_string(fmt::format("recording: each rank's events are in {}.rank<R>.json until the job "
                                             "ends (kolo-trace merge {} joins them)", path, path)))));
  if (c.store) {
    s->store = c.store->connect_again(rdv::Millis(config::rendezvous_timeout_ms()),
                                      auth::Identity{s->pid, 0, -1});
    std::int64_t best = -1;
    for (int i = 0; i < 16; ++i) {
      const std::int64_t t0 = now();
      const std::int64_t server = s->store->server_clock_ns();
      const std::int64_t t1 = now();
      if (best < 0 || t1 - t0 < best) {
        best = t1 - t0;
        s->offset = server - (t0 + t1) / 2;
      }
    }
  } else {
    s->offset = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count() - now();
  }
  std::vector<Event> stale;  // recorded after an earlier session stopped
  take_events(stale);
  c.timeline = std::make_unique<Attachment>();
  Session* raw = s.get();
  session = std::move(s);
  recording = true;
  raw->snapshots = std::thread([raw] { raw->snapshot_loop(); });
}

void close_session(bool from_attachment) {
  std::unique_ptr<Session> s;
  {
    std::lock_guard lk(session_mu);
    s = std::move(session);
  }
  if (!s) return;
  recording = false;
  {
    std::lock_guard lk(s->wake_mu);
    s->stopping = true;
  }
  s->wake.notify_all();
  s->snapshots.join();
  try {
    std::lock_guard g(s->mu);
    s->collect();
    s->snapshot();
    s->merge();
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "timeline: {}; the snapshot {} stays (kolo-trace merge {} joins the ranks' snapshots)",
        e.what(), s->part, s->path);
  }
  // An explicit stop: detach from the communicator (when the communicator
  // goes, its Attachment is what called us and is being destroyed already).
  if (!from_attachment) s->ctx->timeline.reset();
}

}  // namespace kolo::detail::timeline
