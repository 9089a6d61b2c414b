// kolorun's command line: the launcher's own flags, then the command that
// every rank runs, passed through untouched.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hosts.h"

namespace kolorun {

struct Options {
  int np = 0;
  std::optional<std::string> output_dir;  // per-rank files instead of relayed output
  bool tag_output = true;                 // "[r] " before every relayed line
  double timeout_s = 0;                   // 0: no limit on the job's duration
  double grace_s = 3;                     // SIGTERM -> SIGKILL delay when stopping ranks
  std::vector<std::string> command;       // argv of every rank, command[0] not yet resolved

  // Multi-host (-H / --hostfile); `hosts` empty: every rank runs here.
  std::vector<HostSlots> hosts;
  std::string hosts_text;                 // "-H a:2,b:2" or "--hostfile F", for messages
  int ssh_port = 0;                       // -p, 0: ssh's default
  std::string identity;                   // -i
  std::string rsh;                        // --rsh, else KOLO_RSH, else "ssh"
  std::vector<std::string> env;           // -x, resolved to "NAME=value"
  std::string network_interface;          // --network-interface NAME|CIDR, also KOLO_IFACE
  double host_timeout_s = 0;              // --host-timeout; 0: KOLO_PEER_TIMEOUT_MS + 5 s

  // Elastic (--min-np, --max-np or --host-discovery-script given; elastic_driver.h).
  bool elastic = false;
  int min_np = 1;                         // default: -np when given, else 1
  int max_np = 0;                         // 0: every listed slot
  std::string discovery_script;           // absolute path; empty: -H/--hostfile, else localhost:np
  int slots_per_host = 1;                 // slots of a discovered host listed without them
  double elastic_timeout_s = 600;         // below --min-np this long: the job ends
  double join_timeout_s = 30;             // added workers this long to reach init(), then left out
};

// Either options to run with, or the exit status kolorun ends with right away
// (0 after --help/--version, 2 after a usage error, the message already printed).
struct ParseResult {
  std::optional<Options> options;
  int exit_code = 0;
};

ParseResult parse_options(int argc, char** argv);

}  // namespace kolorun
