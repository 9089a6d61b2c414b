#include "options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <cstdio>
#include <string_view>

namespace kolorun {

namespace {

constexpr const char* kUsage = "kolorun -np N [options] cmd [args...]";

constexpr const char* kFooter = R"(Every rank runs `cmd args...` (cmd looked up in PATH; args, whatever they look
like, are passed to it untouched), with stdin from /dev/null and these
variables added to kolorun's environment:
  KOLO_RANK          this rank, 0..N-1
  KOLO_SIZE          N
  KOLO_LOCAL_RANK    rank on this host (= KOLO_RANK: all ranks run here)
  KOLO_LOCAL_SIZE    ranks on this host (= N)
  KOLO_STORE_ADDR    127.0.0.1:PORT of the rendezvous store kolorun hosts
  KOLO_JOB_ID        16 hex digits, random per job
  KOLO_SECRET        32 hex digits from /dev/urandom, the job's shared secret

When a rank exits non-zero or dies by a signal, kolorun sends SIGTERM to every
other rank's process group, SIGKILL after the grace period, and exits with that
rank's code (128+signal for a signal). SIGINT/SIGTERM to kolorun are forwarded
the same way (exit 130/143); --timeout exits 124; usage errors exit 2.)";

// CLI11's generated usage line cannot say that the command comes last.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return std::string("Usage: ") + kUsage + "\n";
  }
};

void usage_error(const std::string& text) {
  std::fprintf(stderr, "kolorun: %s\n", text.c_str());
}

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
      flags.push_back(fmt::format("--{}={}", opt->get_lnames().front(), argv[++i]));
    } else {
      flags.push_back(tok);
    }
  }
  for (; i < argc; ++i) command.emplace_back(argv[i]);
}

}  // namespace

ParseResult parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{"kolorun: start N ranks of a kolo job on this host, relay their output, and stop "
               "them all when one fails.",
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

  if (app.count("--np") == 0) {
    usage_error(fmt::format("-np N is required (the number of ranks); usage: {}", kUsage));
    return {std::nullopt, 2};
  }
  if (o.np < 1) {
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
  if (o.command.empty()) {
    usage_error(fmt::format("no command given; usage: {}", kUsage));
    return {std::nullopt, 2};
  }
  return {std::move(o), 0};
}

}  // namespace kolorun
