/*
 * clock_shift.so: shifts a process's wall clock (CLOCK_REALTIME and its
 * variants, gettimeofday, time) by a number of milliseconds read from the
 * file named by LOCKKIT_CLOCK_SHIFT_FILE at every call, so a test can step
 * a running server's clock forward or back by rewriting that file (write a
 * new file and rename it over the old one). The monotonic clocks are left
 * alone, as a real clock step leaves them.
 *
 * libfaketime does this in general, but its 0.9.10 (Debian's) does not
 * start under redis-server: jemalloc reads the clock while libfaketime
 * initialises and libfaketime gives up on the recursion. This shim calls
 * the kernel directly and allocates nothing, so it needs no initialisation.
 *
 * Built and preloaded by scripts/services (service redis-clock):
 *   cc -shared -fPIC -O2 -o clock_shift.so clock_shift.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The shift in ms (0 when the file is missing or unreadable). */
static long long shift_ms(void) {
  static const char *path;
  static int looked;
  char buf[32];
  long long ms = 0;
  int neg = 0, fd;
  ssize_t n, i = 0;
  if (!looked) {
    path = getenv("LOCKKIT_CLOCK_SHIFT_FILE");
    looked = 1;
  }
  if (!path) return 0;
  fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  n = (ssize_t)syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return 0;
  if (buf[0] == '-') neg = 1, i = 1;
  for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) ms = ms * 10 + (buf[i] - '0');
  return neg ? -ms : ms;
}

static int is_wall(clockid_t id) {
  return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  long long ns, shift;
  int rc = (int)syscall(SYS_clock_gettime, id, ts);
  if (rc != 0 || !is_wall(id)) return rc;
  shift = shift_ms();
  ns = (long long)ts->tv_nsec + (shift % 1000) * 1000000LL;
  ts->tv_sec += shift / 1000 + ns / 1000000000LL;
  ns %= 1000000000LL;
  if (ns < 0) ns += 1000000000LL, ts->tv_sec -= 1;
  ts->tv_nsec = (long)ns;
  return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  (void)tz;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}

time_t time(time_t *t) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}
