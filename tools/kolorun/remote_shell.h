// How kolorun reaches other hosts: ssh by default, or the command of --rsh /
// KOLO_RSH (Open MPI's plm_rsh_agent), run as `CMD [ARGS...] HOST COMMAND`.
//
// When the command is ssh (its program's name is "ssh"), kolorun adds, right
// after the program name so that they win over the user's own -o options and
// ~/.ssh/config: BatchMode=yes (a missing key is an error, never a password
// prompt), ConnectTimeout, and ServerAliveInterval/CountMax (a host whose link
// went down ends the session), then the user's ARGS, then -p PORT and
// -i IDENTITY from kolorun's flags. Any other command gets HOST and the
// remote command only.
#pragma once

#include <string>
#include <vector>

#include "hosts.h"

namespace kolorun {

struct RemoteShell {
  std::vector<std::string> words;  // the command and its options
  bool is_ssh = false;
  // argv that runs `remote` (one shell command line) on `host`.
  std::vector<std::string> argv(const std::string& host, const std::string& remote) const;
};

// Splits `rsh` (--rsh, else KOLO_RSH, else "ssh") into words as a shell
// would (quotes, backslashes; no command substitution) and adds kolorun's
// ssh options. port 0 / empty identity: not given. Throws std::runtime_error
// on a command line that does not parse, or -p/-i with a non-ssh command.
RemoteShell make_remote_shell(const std::string& rsh, int port, const std::string& identity,
                              int alive_interval_s);

// `word` quoted for a POSIX shell (the remote login shell reads the command).
std::string shell_quote(const std::string& word);

// Runs `true` on every host at once and waits for all (at most timeout_s);
// returns one message per host that could not be reached, naming the host
// and the command and quoting what it printed (ssh's own error).
std::vector<std::string> check_hosts(const RemoteShell& rsh, const std::vector<std::string>& hosts,
                                     double timeout_s);

}  // namespace kolorun
