// kolo::timeline's public calls and what the recorder (timeline/recorder.h)
// needs of a communicator; the file and the merge are timeline_writer.cc's.
#include "timeline/recorder.h"

#include <mutex>
#include <utility>

#include "comm/context.h"
#include "report/timeline_writer.h"

namespace kolo::detail::timeline {

namespace {

thread_local std::string next_name;  // name_next()'s, for the next collective issued here
std::mutex comm_mu;                  // makes each Context's CommInfo once

}  // namespace

void Trace::arm(Context& c, std::size_t bytes) {
  ev_ = std::make_shared<Event>();
  ev_->bytes = bytes;
  ev_->submit = now();
  if (!next_name.empty()) ev_->name = std::exchange(next_name, {});
  std::lock_guard lk(comm_mu);
  if (!c.timeline_comm) {
    auto info = std::make_shared<CommInfo>();
    info->key = c.base_prefix.empty() ? c.prefix : c.base_prefix;
    for (int q = 0; q < c.size; ++q) info->world.push_back(c.world_rank(q));
    c.timeline_comm = std::move(info);
  }
  ev_->comm = c.timeline_comm;
}

Attachment::~Attachment() { close_session(true); }

}  // namespace kolo::detail::timeline

namespace kolo::timeline {

namespace tl = detail::timeline;

void start(const Communicator& comm, const std::string& path) {
  if (!comm.ctx_) throw Error(rank_prefix() + "timeline: the communicator is not initialised");
  tl::open_session(*comm.ctx_, path);
}

void stop() { tl::close_session(); }

bool on() { return tl::on(); }

std::int64_t now_ns() { return tl::now(); }

void name_next(const std::string& name) {
  if (tl::on()) tl::next_name = name;
}

void span(const char* category, const std::string& name, std::int64_t begin_ns, std::int64_t end_ns,
          const std::string& args_json) {
  if (!tl::on()) return;
  tl::Event e;
  e.category = category;  // callers pass literals; the writer copies it out
  e.name = name;
  e.args = args_json;
  e.begin = begin_ns;
  e.end = end_ns;
  tl::record(std::move(e));
}

}  // namespace kolo::timeline
