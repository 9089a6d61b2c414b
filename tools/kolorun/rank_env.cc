#include "rank_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "core/config.h"
#include "torchrun_env.h"

namespace kolorun {

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("cannot open /dev/urandom: ") + std::strerror(errno));
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::read(fd, raw.data() + got, bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("cannot read /dev/urandom");
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  return hex;
}

std::vector<std::string> kolo_variables(int rank, int size, int local_rank, int local_size,
                                        const JobIdentity& job, const std::string& iface) {
  std::vector<std::string> v = {
      "KOLO_RANK=" + std::to_string(rank),
      "KOLO_SIZE=" + std::to_string(size),
      "KOLO_LOCAL_RANK=" + std::to_string(local_rank),
      "KOLO_LOCAL_SIZE=" + std::to_string(local_size),
      "KOLO_STORE_ADDR=" + job.store_addr,
      "KOLO_JOB_ID=" + job.job_id,
      "KOLO_SECRET=" + job.secret,
  };
  if (!iface.empty()) v.push_back("KOLO_IFACE=" + iface);
  return v;
}

std::vector<std::string> elastic_variables(const std::string& worker_id, const JobIdentity& job,
                                           const std::string& iface, double elastic_timeout_s) {
  std::vector<std::string> v = {
      "KOLO_WORKER_ID=" + worker_id,
      "KOLO_STORE_ADDR=" + job.store_addr,
      "KOLO_JOB_ID=" + job.job_id,
      "KOLO_SECRET=" + job.secret,
      "KOLO_ELASTIC_TIMEOUT_MS=" + std::to_string(static_cast<long long>(elastic_timeout_s * 1000)),
  };
  if (!iface.empty()) v.push_back("KOLO_IFACE=" + iface);
  // No torchrun variables (torchrun_env.h says why): those of an outer job go.
  const auto removed = torchrun_removals();
  v.insert(v.end(), removed.begin(), removed.end());
  return v;
}

std::vector<std::string> kolo_settings() {
  static const std::set<std::string> not_forwarded = {"KOLO_RANK",       "KOLO_SIZE",   "KOLO_LOCAL_RANK",
                                                     "KOLO_LOCAL_SIZE", "KOLO_STORE_ADDR", "KOLO_JOB_ID",
                                                     "KOLO_SECRET",     "KOLO_HOSTNAME",
                                                     "KOLO_WORKER_ID", "KOLO_ELASTIC_TIMEOUT_MS"};
  std::vector<std::string> out;
  for (const std::string& kv : kolo::config::environment()) {
    const auto eq = kv.find('=');
    if (kv.rfind("KOLO_", 0) == 0 && eq != std::string::npos && !not_forwarded.count(kv.substr(0, eq)))
      out.push_back(kv);
  }
  return out;
}

std::vector<std::string> environment_with(const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> vars;
  for (const std::string& kv : kolo::config::environment()) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& kv : overrides) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) vars.erase(kv);  // a bare name removes the variable
    else vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}


}  // namespace kolorun
