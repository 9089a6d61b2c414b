#include "rank_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

extern char** environ;

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

std::vector<std::string> rank_environment(int rank, int size, const JobIdentity& job) {
  // A map so that a KOLO_RANK inherited from an outer job (kolorun started
  // from inside a rank) is replaced rather than duplicated.
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  vars["KOLO_RANK"] = std::to_string(rank);
  vars["KOLO_SIZE"] = std::to_string(size);
  vars["KOLO_LOCAL_RANK"] = std::to_string(rank);  // every rank runs on this host
  vars["KOLO_LOCAL_SIZE"] = std::to_string(size);
  vars["KOLO_STORE_ADDR"] = job.store_addr;
  vars["KOLO_JOB_ID"] = job.job_id;
  vars["KOLO_SECRET"] = job.secret;

  std::vector<std::string> out;
  out.reserve(vars.size());
  for (auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

}  // namespace kolorun
