#include "core/config.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace kolo::config {

std::int64_t env_int(const char* name, std::int64_t def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0') fail("{}={} is not an integer", name, v);
  return x;
}

std::string env_str(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return (v == nullptr || *v == '\0') ? def : std::string(v);
}

}  // namespace kolo::config
