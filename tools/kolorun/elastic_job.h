// An elastic job from the launching kolorun (--min-np, --max-np,
// --host-discovery-script): hosts from the script (or -H/--hostfile, or this
// host), the store where every host reaches it, and the elastic driver
// (elastic_driver.h) over the usual per-host agents (host_job.h).
#pragma once

#include "options.h"

namespace kolorun {

// Returns kolorun's exit code: 1 when the discovery script's first run fails
// or the store cannot start, 2 for a bad --rsh or --network-interface, else
// the job's code (elastic_driver.h "The end").
int run_elastic(const Options& o);

}  // namespace kolorun
