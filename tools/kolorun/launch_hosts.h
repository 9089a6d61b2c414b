// A multi-host job from the launching kolorun (-H / --hostfile): place the
// ranks, check every remote host, start the store where all hosts reach it,
// start one agent per host and supervise them (host_job.h).
#pragma once

#include "options.h"

namespace kolorun {

// Returns kolorun's exit code: 2 for usage errors found now (a command
// missing here, a bad --rsh or --network-interface), 1 when a host cannot be
// reached (nothing started), else the job's code (host_job.h).
int run_hosts(const Options& o);

}  // namespace kolorun
