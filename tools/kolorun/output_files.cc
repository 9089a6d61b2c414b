#include "output_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace kolorun {

bool open_output_files(const std::string& dir_name, int np, std::vector<int>& files) {
  namespace fs = std::filesystem;
  const fs::path dir = dir_name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "kolorun: cannot create output directory '%s': %s\n", dir.c_str(), ec.message().c_str());
    return false;
  }
  for (int r = 0; r < np; ++r) {
    for (const char* stream : {"stdout", "stderr"}) {
      const fs::path file = dir / fmt::format("rank.{}.{}", r, stream);
      int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        std::fprintf(stderr, "kolorun: cannot create '%s': %s\n", file.c_str(), std::strerror(errno));
        return false;
      }
      files.push_back(fd);
    }
  }
  return true;
}

}  // namespace kolorun
