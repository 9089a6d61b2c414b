// The timeline's file: per-rank snapshots while recording, one merged
// Chrome-trace JSON at the end (timeline_writer.cc explains the design).
#pragma once

#include <string>

namespace kolo::detail {
struct Context;
}

namespace kolo::detail::timeline {

// Starts recording with c's rank 0 writing `path` (kolo::timeline::start).
void open_session(Context& c, const std::string& path);
// Stops recording, merges every rank's events into the file; nothing when no
// session runs. Never throws: a failure is logged (the job's own result
// matters more than its trace) and the per-rank snapshots stay.
// from_attachment: called by the communicator's Attachment as it goes.
void close_session(bool from_attachment = false);

}  // namespace kolo::detail::timeline
