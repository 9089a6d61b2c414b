// Cross-core exchange probe: how fast can one core read what another core has
// just written? That is the heart of every shared-memory collective (kolo's
// chunked allreduce moves each chunk this way twice), and on a virtual machine
// it can change under a running job: on the dev VM it flips, for seconds at a
// time, between ~35 us and ~165 us per 256 KiB exchange while a plain memcpy
// stays steady (README, Performance).
//
// Two processes, pinned to CPUs 0 and 1, each write S bytes into their own
// shared slot, synchronise, copy the peer's slot out, synchronise: the time of
// one round on CPU 0. Rounds alternate between ordinary stores (the data stays
// dirty in the writer's cache and the reader fetches it from there) and
// non-temporal stores (the data goes to memory and the reader fetches it from
// there), and the medians of each kind are printed per window of 200 rounds.
//
//   cc -O2 -o xcore bench/xcore.c && ./xcore [bytes=262144] [rounds=4000]
#define _GNU_SOURCE
#include <emmintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  _Atomic long epoch;
  char pad[56];  // one cache line per process
} Flag;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void barrier(Flag* f, int me, long e) {
  atomic_store(&f[me].epoch, e);
  while (atomic_load(&f[1 - me].epoch) < e) _mm_pause();
}

static void stream_copy(char* dst, const char* src, size_t n) {  // n: a multiple of 16, dst 16-aligned
  for (size_t i = 0; i < n; i += 16)
    _mm_stream_si128((__m128i*)(dst + i), _mm_loadu_si128((const __m128i*)(src + i)));
  _mm_sfence();
}

static int by_value(const void* a, const void* b) {
  double d = *(const double*)a - *(const double*)b;
  return (d > 0) - (d < 0);
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoul(argv[1], NULL, 10) : 262144;
  int rounds = argc > 2 ? atoi(argv[2]) : 4000;
  bytes = (bytes + 4095) / 4096 * 4096;
  char* shared = mmap(NULL, 4096 + 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return perror("mmap"), 1;
  memset(shared, 0, 4096 + 2 * bytes);
  Flag* flags = (Flag*)shared;
  char* slot[2] = {shared + 4096, shared + 4096 + bytes};

  pid_t child = fork();
  int me = child == 0;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me, &cpus);
  if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) perror("sched_setaffinity (running unpinned)");
  char* src = aligned_alloc(4096, bytes);
  char* dst = aligned_alloc(4096, bytes);
  memset(src, me + 1, bytes);
  memset(dst, 0, bytes);
  double* t = calloc(rounds, sizeof *t);
  long e = 0, check = 0;
  for (int r = 0; r < rounds; ++r) {
    barrier(flags, me, ++e);
    double t0 = now();
    if (r % 2 == 0)
      memcpy(slot[me], src, bytes);
    else
      stream_copy(slot[me], src, bytes);
    barrier(flags, me, ++e);
    memcpy(dst, slot[1 - me], bytes);
    check += dst[bytes - 1];
    barrier(flags, me, ++e);
    t[r] = now() - t0;
  }
  if (check != (long)rounds * (2 - me)) return fprintf(stderr, "wrong data\n"), 1;
  if (me == 1) return 0;

  printf("%zu bytes each way, us per round (ordinary / non-temporal stores), median per 200 rounds:\n", bytes);
  for (int w = 0; w < rounds; w += 200) {
    double kind[2][100];
    int n[2] = {0, 0};
    for (int r = w; r < w + 200 && r < rounds; ++r) kind[r % 2][n[r % 2]++] = t[r];
    for (int k = 0; k < 2; ++k) qsort(kind[k], n[k], sizeof(double), by_value);
    if (n[0] && n[1]) printf("%.0f/%.0f ", kind[0][n[0] / 2] * 1e6, kind[1][n[1] / 2] * 1e6);
  }
  printf("\n");
  waitpid(child, NULL, 0);
  return 0;
}
