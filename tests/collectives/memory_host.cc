// check_collectives' buffers without CUDA: host memory only (memory.h).
#include <cstdio>

#include "memory.h"

namespace kolo::test {

bool use_cuda(int) {
  std::fprintf(stderr, "skipped: the tests were built without CUDA (no GPU check possible)\n");
  return false;
}
bool on_cuda() { return false; }
Place place() { return Place::host(); }
void mirror(char*, std::size_t) {}
void forget(char*) {}
char* at(char* p) { return p; }
const char* at(const char* p) { return p; }
void upload(const char*) {}
void download(char*) {}
void settle() {}
std::string while_captured(const std::function<void()>&) { return "not in CUDA mode"; }

}  // namespace kolo::test
