#include "shm_sweep.h"

#include <sys/mman.h>

#include <filesystem>
#include <system_error>

namespace kolorun {

int sweep_shm(const std::string& job_id) {
  const std::string prefix = "kolo-" + job_id + "-";
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace kolorun
