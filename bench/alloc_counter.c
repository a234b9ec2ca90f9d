/* An LD_PRELOAD counter of heap allocations, for bench/per_request.sh: every malloc, calloc,
   realloc, aligned_alloc, memalign and posix_memalign is counted and passed on to glibc's own.
   The count is written to $ALLOC_COUNT_FILE every 100 ms by a thread of its own, so the
   script reads it before and after a load run without stopping the process. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

static atomic_ulong allocations;

void* malloc(size_t n) {
  atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t s) {
  atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
  return __libc_calloc(n, s);
}
void* realloc(void* p, size_t n) {
  atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) {
  atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  void* p = memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

/* open/write, not stdio: the reporter allocates nothing, so it counts nothing of its own. */
static void* report(void* path) {
  char line[32];
  for (;;) {
    int n = snprintf(line, sizeof line, "%lu\n", atomic_load_explicit(&allocations, memory_order_relaxed));
    /* Written aside and renamed over: a reader never finds the file empty mid-write. */
    char aside[4096];
    snprintf(aside, sizeof aside, "%s.tmp", (const char*)path);
    int fd = open(aside, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      int ok = write(fd, line, (size_t)n) == n;
      close(fd);
      if (ok) rename(aside, (const char*)path);
    }
    struct timespec t = {0, 100 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  return NULL;
}

__attribute__((constructor)) static void start(void) {
  const char* path = getenv("ALLOC_COUNT_FILE");
  if (!path) return;
  pthread_t t;
  if (pthread_create(&t, NULL, report, (void*)path) == 0) pthread_detach(t);
}
