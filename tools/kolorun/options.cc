#include "options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/config.h"
#include "say.h"

namespace kolorun {

namespace {

constexpr const char* kUsage = "kolorun -np N [options] cmd [args...]";
constexpr const char* kUsageHosts =
    "kolorun [-np N] -H host1:slots,host2:slots | --hostfile FILE [options] cmd [args...]";

constexpr const char* kFooter = R"(Every rank runs `cmd args...` (cmd looked up in PATH; args, whatever they look
like, are passed to it untouched), with stdin from /dev/null and these
variables added to kolorun's environment:
  KOLO_RANK          this rank, 0..N-1
  KOLO_SIZE          N
  KOLO_LOCAL_RANK    rank among the ranks of its host
  KOLO_LOCAL_SIZE    ranks on its host
  KOLO_STORE_ADDR    ADDRESS:PORT of the rendezvous store kolorun hosts
                     (127.0.0.1 when every rank runs here)
  KOLO_JOB_ID        16 hex digits, random per job
  KOLO_SECRET        32 hex digits from /dev/urandom, the job's shared secret
  KOLO_IFACE         the --network-interface value, when given
  KOLO_TIMELINE      the --timeline-filename file (absolute), when given
  torchrun's, so that a program written for torchrun runs unchanged (torch's
  env://, Lightning, Accelerate); kolo itself reads the KOLO_* ones:
  RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE  as the KOLO_* above
  GROUP_RANK, GROUP_WORLD_SIZE  its host's index in the job, the hosts
  ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME  RANK, WORLD_SIZE, "default"
  TORCHELASTIC_RUN_ID  KOLO_JOB_ID (Lightning detects a launched job by it)
  TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS  0
  TORCHELASTIC_USE_AGENT_STORE  False
  MASTER_ADDR, MASTER_PORT  a port free on rank 0's host at the start (from
                     KOLO_PORT_RANGE when set), for rank 0's TCPStore; at the
                     address the other hosts reach (127.0.0.1 on one host)
  (an elastic job's workers get none of them: their rank changes)
  and each -x variable. Every other KOLO_* variable of kolorun's environment
  (kolo's settings: KOLO_TRANSPORT, KOLO_HIERARCHICAL, ...; not KOLO_HOSTNAME)
  reaches every rank, on other hosts too; ranks whose settings that must agree
  differ fail at kolo::init() naming the variable, its values and the ranks.

Several hosts (-H a:4,b:4 or --hostfile): ranks fill the hosts in the order
given (a gets ranks 0-3, b 4-7); -np defaults to the total slots and may be
less. A host whose name resolves to an address of this machine runs its ranks
here; every other host is reached with ssh (BatchMode=yes, never a prompt; or
--rsh / KOLO_RSH), all checked in parallel before anything starts (an
unreachable host is an error with ssh's message, exit 1). There, kolorun's
agent (this same program, at this same absolute path) starts the host's ranks
in this working directory and relays their output and exits; the job's secret
reaches it over ssh's stdin, never a command line. The store listens on all
addresses and is advertised at this host's address on the interface that
routes to the first remote host (or on --network-interface). A lost host (its
agent or ssh ended, or nothing from it for --host-timeout seconds) fails the
job (exit 1) like a failing rank; agents kill their ranks when kolorun or the
link to it is gone.

When a rank exits non-zero or dies by a signal, kolorun sends SIGTERM to every
other rank's process group (on every host), SIGKILL after the grace period, and
exits with that rank's code (128+signal for a signal). SIGINT/SIGTERM to kolorun
are forwarded the same way (exit 130/143); --timeout exits 124; usage errors
exit 2.)";

// CLI11's generated usage line cannot say that the command comes last.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return std::string("Usage: ") + kUsage + "\n       " + kUsageHosts + "\n";
  }
};

void usage_error(const std::string& text) { say(text); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Splits argv into kolorun's own flags and the command: the command starts at
// the first word that is not a flag or a flag's value (or after "--"), and
// nothing after it is parsed, so `kolorun -np 2 prog -np 5` gives prog its
// own -np. Flags are rewritten to --name=value so that CLI11 accepts values
// that look like flags ("-np -3" reaches the range check, not a parse error);
// "-np" itself is MPI's spelling, which CLI11 would read as "-n p".
void split_args(const CLI::App& app, int argc, char** argv, std::vector<std::string>& flags,
                std::vector<std::string>& command) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string tok = argv[i];
    if (tok == "--") {
      ++i;
      break;
    }
    if (tok.size() < 2 || tok[0] != '-') break;  // first positional: the command
    if (tok == "-np" || starts_with(tok, "-np=")) tok = "-" + tok;
    const std::string name = tok.substr(0, tok.find('='));
    const CLI::Option* opt = app.get_option_no_throw(name);
    const bool takes_value = opt != nullptr && opt->get_items_expected_min() > 0;
    if (takes_value && tok.find('=') == std::string::npos && i + 1 < argc) {
      if (opt->get_lnames().empty()) {  // a short-only flag (-x): CLI11 reads "-x value"
        flags.push_back(tok);
        flags.push_back(argv[++i]);
      } else {
        flags.push_back(fmt::format("--{}={}", opt->get_lnames().front(), argv[++i]));
      }
    } else {
      flags.push_back(tok);
    }
  }
  for (; i < argc; ++i) command.emplace_back(argv[i]);
}

// The elastic flags (Horovod's horovodrun): consistent counts, a script that
// can run, nothing that needs a fixed set of ranks. Returns 0 or 2.
int check_elastic(const CLI::App& app, Options& o, bool have_hosts) {
  auto bad = [](const std::string& text) {
    usage_error(text);
    return 2;
  };
  if (app.count("--host-discovery-script") > 0 && have_hosts)
    return bad("give either --host-discovery-script or -H/--hostfile, not both");
  if (app.count("--output-dir") > 0) return bad("--output-dir is not supported in an elastic job (its workers come and go)");
  if (app.count("--host-discovery-script") == 0 && !have_hosts && app.count("--np") == 0)
    return bad("an elastic job needs its hosts: --host-discovery-script FILE, -H or --hostfile, or -np N on this host");
  if (app.count("--np") > 0 && o.np < 1) return bad(fmt::format("-np must be at least 1, got {}", o.np));
  if (app.count("--min-np") == 0) o.min_np = app.count("--np") > 0 ? o.np : 1;
  if (o.min_np < 1) return bad(fmt::format("--min-np must be at least 1, got {}", o.min_np));
  if (app.count("--max-np") > 0 && o.max_np < o.min_np)
    return bad(fmt::format("--max-np {} is less than --min-np {}", o.max_np, o.min_np));
  if (app.count("--np") > 0 && o.np < o.min_np) return bad(fmt::format("-np {} is less than --min-np {}", o.np, o.min_np));
  if (app.count("--np") > 0 && app.count("--max-np") > 0 && o.np > o.max_np)
    return bad(fmt::format("-np {} is more than --max-np {}", o.np, o.max_np));
  if (app.count("--np") == 0) o.np = 0;  // every listed slot, up to --max-np
  if (o.slots_per_host < 1) return bad(fmt::format("--slots-per-host must be at least 1, got {}", o.slots_per_host));
  if (!(o.elastic_timeout_s > 0)) return bad(fmt::format("--elastic-timeout must be positive, got {:g}", o.elastic_timeout_s));
  if (!(o.join_timeout_s > 0)) return bad(fmt::format("--join-timeout must be positive, got {:g}", o.join_timeout_s));
  if (!o.discovery_script.empty()) {
    std::error_code ec;
    o.discovery_script = std::filesystem::absolute(o.discovery_script, ec).string();
    if (::access(o.discovery_script.c_str(), X_OK) != 0)
      return bad(fmt::format("--host-discovery-script {}: cannot execute it: {}", o.discovery_script, std::strerror(errno)));
  }
  if (o.command.empty()) return bad(fmt::format("no command given; usage: {}", kUsage));
  return 0;
}

}  // namespace

ParseResult parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{"kolorun: start N ranks of a kolo job on this host or on several, relay their output, "
               "and stop them all when one fails.",
               "kolorun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.footer(kFooter);
  app.set_version_flag("--version", std::string("kolorun (kolo) ") + KOLO_VERSION_STRING);
  app.add_option("-n,--np", o.np, "Number of ranks to start (also -np N)")->type_name("N");
  app.add_option("--output-dir", o.output_dir,
                 "Write rank r's output to DIR/rank.<r>.stdout and DIR/rank.<r>.stderr "
                 "(DIR is created) instead of relaying it")
      ->type_name("DIR");
  app.add_flag_callback("--tag-output", [&o] { o.tag_output = true; },
                        "Prefix every relayed line with \"[r] \", its rank (the default)");
  app.add_flag_callback("--no-tag-output", [&o] { o.tag_output = false; },
                        "Relay the ranks' lines as they are");
  app.add_option("--timeout", o.timeout_s,
                 "Stop all ranks and exit 124 if the job is still running after S seconds")
      ->type_name("S");
  app.add_option("--grace-period", o.grace_s,
                 "Seconds between SIGTERM and SIGKILL when stopping ranks (default 3)")
      ->type_name("S");
  std::string host_list, hostfile;
  std::vector<std::string> exports;
  app.add_option("-H,--host", host_list,
                 "Hosts and their slots: host1:N,host2:M (a bare host is 1 slot); ranks fill them in order")
      ->type_name("LIST");
  app.add_option("--hostfile", hostfile,
                 "File of hosts, one per line: 'host slots=N', 'host:N' or 'host'; # starts a comment")
      ->type_name("FILE");
  app.add_option("-p,--port", o.ssh_port, "ssh port of the remote hosts")->type_name("PORT");
  app.add_option("-i,--identity", o.identity, "ssh identity (private key) file")->type_name("FILE");
  app.add_option("--rsh", o.rsh,
                 "Command that reaches a remote host instead of ssh, run as CMD [ARGS...] HOST COMMAND "
                 "(default: $KOLO_RSH, else ssh), e.g. \"ssh -F cfg -o UserKnownHostsFile=f\"")
      ->type_name("\"CMD [ARGS...]\"");
  app.add_option("-x", exports,
                 "Set VAR in every rank, on every host: -x VAR passes kolorun's value, -x VAR=value sets it "
                 "(repeatable)")
      ->type_name("VAR[=value]");
  app.add_option("--network-interface", o.network_interface,
                 "Interface (name, or a CIDR such as 10.0.0.0/24) whose address the store is advertised at; "
                 "also given to the ranks as KOLO_IFACE (default: $KOLO_IFACE, else the interface that "
                 "routes to the first remote host)")
      ->type_name("NAME|CIDR");
  std::string timeline;
  app.add_option("--timeline-filename", timeline,
                 "Record a Chrome-trace timeline of every collective of every rank into FILE (Perfetto, "
                 "chrome://tracing); given to the ranks as KOLO_TIMELINE; kolo-trace report FILE summarises it")
      ->type_name("FILE");
  app.add_option("--host-timeout", o.host_timeout_s,
                 "A host from which nothing arrives for S seconds is lost and fails the job "
                 "(default: KOLO_PEER_TIMEOUT_MS + 5 s, 15 s)")
      ->type_name("S");
  app.add_option("--min-np", o.min_np,
                 "Elastic: the job goes on while at least N workers are left (default: -np, else 1)")
      ->type_name("N");
  app.add_option("--max-np", o.max_np, "Elastic: at most N workers (default: every slot listed)")->type_name("N");
  app.add_option("--host-discovery-script", o.discovery_script,
                 "Elastic: an executable printing the available hosts, 'host:slots' per line; run every second")
      ->type_name("FILE");
  app.add_option("--slots-per-host", o.slots_per_host,
                 "Elastic: slots of a discovered host listed without them (default 1)")
      ->type_name("N");
  app.add_option("--elastic-timeout", o.elastic_timeout_s,
                 "Elastic: with fewer than --min-np workers for S seconds the job ends (default 600)")
      ->type_name("S");
  app.add_option("--join-timeout", o.join_timeout_s,
                 "Elastic: workers being added may take S seconds to reach init(); then the next generation "
                 "is published without those still on their way (default 30)")
      ->type_name("S");

  std::vector<std::string> flags;
  split_args(app, argc, argv, flags, o.command);
  std::reverse(flags.begin(), flags.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(flags);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return {std::nullopt, 0};
  } catch (const CLI::CallForVersion&) {
    std::puts(app.version().c_str());
    return {std::nullopt, 0};
  } catch (const CLI::ParseError& e) {
    usage_error(fmt::format("{}; run kolorun --help for usage", e.what()));
    return {std::nullopt, 2};
  }

  const bool have_hosts = app.count("--host") > 0 || app.count("--hostfile") > 0;
  o.elastic = app.count("--min-np") > 0 || app.count("--max-np") > 0 || app.count("--host-discovery-script") > 0;
  if (!o.elastic) {
    for (const char* flag : {"--slots-per-host", "--elastic-timeout", "--join-timeout"}) {
      if (app.count(flag) > 0) {
        usage_error(fmt::format("{} applies to elastic jobs (--min-np, --max-np, --host-discovery-script)", flag));
        return {std::nullopt, 2};
      }
    }
  }
  if (app.count("--host") > 0 && app.count("--hostfile") > 0) {
    usage_error("give either -H or --hostfile, not both");
    return {std::nullopt, 2};
  }
  try {
    if (app.count("--host") > 0) {
      o.hosts = parse_host_list(host_list);
      o.hosts_text = "-H " + host_list;
    } else if (app.count("--hostfile") > 0) {
      o.hosts = parse_hostfile(hostfile);
      o.hosts_text = "--hostfile " + hostfile;
    }
  } catch (const HostListError& e) {
    usage_error(e.what());
    return {std::nullopt, 2};
  }
  if (!have_hosts && o.discovery_script.empty()) {
    for (const char* flag : {"--port", "--identity", "--rsh", "--host-timeout"}) {
      if (app.count(flag) > 0) {
        usage_error(fmt::format("{} applies to remote hosts, given with -H or --hostfile", flag));
        return {std::nullopt, 2};
      }
    }
  }
  if (app.count("--np") == 0 && have_hosts && !o.elastic) o.np = total_slots(o.hosts);
  if (app.count("--np") == 0 && !have_hosts && !o.elastic) {
    usage_error(fmt::format("-np N is required (the number of ranks); usage: {}", kUsage));
    return {std::nullopt, 2};
  }
  if (have_hosts && o.np > total_slots(o.hosts)) {
    usage_error(fmt::format("-np {} is more than the {} slots of {}", o.np, total_slots(o.hosts), o.hosts_text));
    return {std::nullopt, 2};
  }
  if (app.count("--port") > 0 && (o.ssh_port < 1 || o.ssh_port > 65535)) {
    usage_error(fmt::format("-p must be a port number (1-65535), got {}", o.ssh_port));
    return {std::nullopt, 2};
  }
  if (app.count("--host-timeout") > 0 && !(o.host_timeout_s > 0)) {
    usage_error(fmt::format("--host-timeout must be positive, got {:g}", o.host_timeout_s));
    return {std::nullopt, 2};
  }
  if (app.count("--rsh") == 0) {
    o.rsh = kolo::config::rsh();
  }
  if (app.count("--network-interface") == 0) {
    o.network_interface = kolo::config::iface();
  }
  for (const auto& x : exports) {
    const auto eq = x.find('=');
    const std::string name = x.substr(0, eq);
    if (name.empty() || name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
                            std::string::npos || (name[0] >= '0' && name[0] <= '9')) {
      usage_error(fmt::format("-x {}: '{}' is not a variable name", x, name));
      return {std::nullopt, 2};
    }
    if (eq != std::string::npos) {
      o.env.push_back(x);
    } else if (const auto v = kolo::config::env_var(name)) {
      o.env.push_back(name + "=" + *v);
    } else {
      usage_error(fmt::format("-x {}: {} is not set in kolorun's environment (use -x {}=value)", name, name, name));
      return {std::nullopt, 2};
    }
  }
  if (app.count("--timeline-filename") > 0) {
    // Absolute, so that every rank writes the same file whatever its directory;
    // the directory is checked here, where the error reaches the user first.
    std::error_code ec;
    const auto path = std::filesystem::absolute(timeline, ec);
    const auto dir = path.parent_path();
    if (timeline.empty() || ec || path.filename().empty()) {
      usage_error(fmt::format("--timeline-filename: '{}' is not a file name", timeline));
      return {std::nullopt, 2};
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      usage_error(fmt::format("--timeline-filename {}: cannot write to directory {}: {}", timeline, dir.string(),
                              std::strerror(errno)));
      return {std::nullopt, 2};
    }
    o.env.push_back("KOLO_TIMELINE=" + path.string());
  }
  if (!o.elastic && o.np < 1) {
    usage_error(fmt::format("-np must be at least 1, got {}", o.np));
    return {std::nullopt, 2};
  }
  if (app.count("--timeout") > 0 && !(o.timeout_s > 0)) {
    usage_error(fmt::format("--timeout must be positive, got {:g}", o.timeout_s));
    return {std::nullopt, 2};
  }
  if (!(o.grace_s >= 0)) {
    usage_error(fmt::format("--grace-period must not be negative, got {:g}", o.grace_s));
    return {std::nullopt, 2};
  }
  if (o.elastic) {
    if (int code = check_elastic(app, o, have_hosts); code != 0) return {std::nullopt, code};
  }
  if (o.command.empty()) {
    usage_error(fmt::format("no command given; usage: {}", kUsage));
    return {std::nullopt, 2};
  }
  return {std::move(o), 0};
}

}  // namespace kolorun
