// The signals kolorun acts on, read through a signalfd in its poll loop
// rather than in handlers: a handler could do almost nothing safely, the
// loop can stop ranks, drain their output and print what happened.
#pragma once

#include <string>

namespace kolorun {

// Blocks SIGINT, SIGTERM, SIGCHLD and SIGHUP (unless it arrived ignored, as
// under nohup) and ignores SIGPIPE. Must run before any thread starts (the
// store server's): threads inherit the mask, and a signal left unblocked in
// any thread would be delivered there.
void block_job_signals();

// A non-blocking, close-on-exec signalfd for the blocked signals.
int open_signal_fd();

// "SIGKILL" for 9; "signal 77" for what has no name.
std::string signal_name(int sig);

}  // namespace kolorun
