// A rendezvous store in a process of its own, for the oversize-length test:
//   store_host SECRET
// serves a store keyed by SECRET on 127.0.0.1 under an address-space limit
// of its current size plus 48 MiB, prints "port P hwm_kb H", and when its
// stdin closes prints "hwm_kb H" (peak resident memory) and exits 0. A
// server that tried to buffer an oversize message would die of the limit
// (or show it in H).
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "rendezvous/store.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KOLO_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KOLO_ASAN 1
#endif

namespace {

long status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string name;
  long kb = -1;
  while (f >> name) {
    if (name == field) {
      f >> kb;
      break;
    }
    std::getline(f, name);
  }
  return kb;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: store_host SECRET\n");
    return 2;
  }
  // One malloc arena: a thread's own arena would reserve 64 MiB of address
  // space on its first allocation and trip the limit for no good reason.
  mallopt(M_ARENA_MAX, 1);
  kolo::rdv::StoreServer server("127.0.0.1", 0, kolo::auth::Key::from_secret(argv[1]));
#ifndef KOLO_ASAN  // AddressSanitizer reserves terabytes of shadow memory
  const long vm_kb = status_kb("VmSize:");
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(vm_kb + 48 * 1024) * 1024;
  if (vm_kb <= 0 || setrlimit(RLIMIT_AS, &lim) != 0) {
    std::fprintf(stderr, "store_host: cannot limit the address space\n");
    return 1;
  }
#endif
  std::printf("port %d hwm_kb %ld\n", server.port(), status_kb("VmHWM:"));
  std::fflush(stdout);
  char buf[64];
  while (::read(0, buf, sizeof buf) > 0) {
  }
  std::printf("hwm_kb %ld\n", status_kb("VmHWM:"));
  std::fflush(stdout);
  server.stop();
  return 0;
}
