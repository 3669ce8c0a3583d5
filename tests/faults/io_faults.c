// io_faults: an LD_PRELOAD shim for the fault-injection tests (tests/faults/). Test-only: rayless never
// reads these variables; the test harness sets them on the processes it starts.
//
//   RAYLESS_FAULT_MODE         kill    raise(SIGKILL) in the middle of a write to a matching file
//                              enospc  fail writes to matching files with ENOSPC (a full disk: the
//                                      write that crosses the threshold is short, the next fail)
//                              drop    pretend writes to matching files succeeded, write nothing (a
//                                      writer that ignores errors: only for showing a test can fail)
//                              nullcall  at a write to a matching file, call through a null function
//                                      pointer from io_faults_call_through_null (a corrupt function
//                                      table: the crash report must name the caller)
//                              (unset or empty: the shim does nothing)
//   RAYLESS_FAULT_PATH_SUBSTR  the fault applies to files whose path (readlink /proc/self/fd/N)
//                              contains this string (required)
//   RAYLESS_FAULT_ON           write (default): write, pwrite, writev, fwrite, sendfile, ...
//                              rename: a rename whose old or new name contains the substring; kill:
//                              right after it succeeded, enospc: it fails with ENOSPC
//                              unlink: a removal (unlink, unlinkat, remove, rmdir) of a matching
//                              path; kill: right after it succeeded
//   RAYLESS_FAULT_AFTER_BYTES  the fault starts once this many bytes went to matching files in this
//                              process; kill writes the bytes up to the threshold, then kills (default 0)
//   RAYLESS_FAULT_AFTER_CALLS  ... and once this many matching calls passed unharmed (default 0; for
//                              rename and unlink the only condition)
//   RAYLESS_FAULT_RANK         only in the process whose OMPI_COMM_WORLD_RANK / PMIX_RANK / SLURM_PROCID
//                              is this (default: any process)
//   RAYLESS_FAULT_LOG          append one line to this file each time the fault fires (first time only
//                              for enospc/drop)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { MODE_OFF = 0, MODE_KILL, MODE_ENOSPC, MODE_DROP, MODE_NULLCALL };
enum { ON_WRITE = 0, ON_RENAME, ON_UNLINK };

static int g_mode = -1;  // -1: not read yet
static int g_on = ON_WRITE;
static const char* g_substr = NULL;
static unsigned long long g_after_bytes = 0, g_after_calls = 0;
static unsigned long long g_bytes = 0, g_calls = 0;  // matching so far (atomics below)
static int g_logged = 0;
static const char* g_log = NULL;

static const char* rank_env(void) {
  const char* names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const char* v = getenv(names[i]);
    if (v && *v) return v;
  }
  return NULL;
}

static void configure(void) {
  if (__atomic_load_n(&g_mode, __ATOMIC_ACQUIRE) >= 0) return;
  int mode = MODE_OFF;
  const char* m = getenv("RAYLESS_FAULT_MODE");
  const char* s = getenv("RAYLESS_FAULT_PATH_SUBSTR");
  if (m && s && *s) {
    if (!strcmp(m, "kill")) mode = MODE_KILL;
    else if (!strcmp(m, "enospc")) mode = MODE_ENOSPC;
    else if (!strcmp(m, "drop")) mode = MODE_DROP;
    else if (!strcmp(m, "nullcall")) mode = MODE_NULLCALL;
  }
  const char* want_rank = getenv("RAYLESS_FAULT_RANK");
  if (mode != MODE_OFF && want_rank && *want_rank) {
    const char* mine = rank_env();
    if (!mine || strcmp(mine, want_rank) != 0) mode = MODE_OFF;
  }
  const char* on = getenv("RAYLESS_FAULT_ON");
  g_on = !on ? ON_WRITE : !strcmp(on, "rename") ? ON_RENAME : !strcmp(on, "unlink") ? ON_UNLINK : ON_WRITE;
  g_substr = s;
  const char* b = getenv("RAYLESS_FAULT_AFTER_BYTES");
  const char* c = getenv("RAYLESS_FAULT_AFTER_CALLS");
  g_after_bytes = b ? strtoull(b, NULL, 10) : 0;
  g_after_calls = c ? strtoull(c, NULL, 10) : 0;
  g_log = getenv("RAYLESS_FAULT_LOG");
  __atomic_store_n(&g_mode, mode, __ATOMIC_RELEASE);
}

#define REAL(name) static __typeof__(name)* real_##name; if (!real_##name) real_##name = (__typeof__(name)*)dlsym(RTLD_NEXT, #name)

// one line to RAYLESS_FAULT_LOG through the raw system calls (never through the wrappers below)
static void log_fault(const char* what, const char* path, unsigned long long at) {
  if (!g_log) return;
  char line[PATH_MAX + 256];
  const char* rank = rank_env();
  int n = snprintf(line, sizeof line, "io_faults: %s rank %s pid %d at byte %llu call %llu: %s\n", what,
                   rank ? rank : "-", (int)getpid(), at, g_calls, path);
  if (n < 0) return;
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  int fd = (int)syscall(SYS_open, g_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  syscall(SYS_write, fd, line, (size_t)n);
  syscall(SYS_fsync, fd);
  syscall(SYS_close, fd);
}

// A jump to address 0 from a named, exported function (backtraces show its name); not a tail call, so
// the return address on the stack lies inside it.
__attribute__((noinline, visibility("default"))) void io_faults_call_through_null(void) {
  void (*volatile function)(void) = NULL;
  function();
  __asm__ volatile("" ::: "memory");
}

static int fd_matches(int fd, char* path, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, size - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strstr(path, g_substr) != NULL;
}

static void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = syscall(SYS_write, fd, data, n);
    if (w <= 0) return;
    data += w;
    n -= (size_t)w;
  }
}

// What to do with a write of `count` bytes to fd. Returns 1 when the caller should do the real write
// of *allowed bytes (then *allowed == count), 0 when the shim answered: *result is the return value.
// In kill mode the shim writes the bytes before the threshold itself and never returns.
typedef struct {
  ssize_t result;
} Answer;

static int decide(int fd, size_t count, const void* data_or_null, off_t offset, int positional, Answer* answer) {
  configure();
  if (g_mode == MODE_OFF || g_on != ON_WRITE || count == 0) return 1;
  char path[PATH_MAX];
  if (!fd_matches(fd, path, sizeof path)) return 1;
  unsigned long long before = __atomic_fetch_add(&g_bytes, (unsigned long long)count, __ATOMIC_SEQ_CST);
  unsigned long long calls = __atomic_fetch_add(&g_calls, 1, __ATOMIC_SEQ_CST);
  if (calls < g_after_calls || before + count <= g_after_bytes) return 1;  // not yet
  if (g_mode == MODE_KILL) {
    // write what comes before the threshold, then die mid-write
    size_t head = g_after_bytes > before ? (size_t)(g_after_bytes - before) : 0;
    if (head > count) head = count;
    if (head > 0 && data_or_null) {
      if (positional) {
        const char* p = data_or_null;
        size_t left = head;
        off_t at = offset;
        while (left > 0) {
          ssize_t w = syscall(SYS_pwrite64, fd, p, left, at);
          if (w <= 0) break;
          p += w; left -= (size_t)w; at += w;
        }
      } else {
        write_all(fd, data_or_null, head);
      }
    }
    log_fault("SIGKILL", path, before + head);
    raise(SIGKILL);
    for (;;) pause();
  }
  if (g_mode == MODE_NULLCALL) {
    log_fault("null call", path, before);
    io_faults_call_through_null();
  }
  if (!__atomic_exchange_n(&g_logged, 1, __ATOMIC_SEQ_CST))
    log_fault(g_mode == MODE_ENOSPC ? "ENOSPC" : "dropped write", path, before);
  if (g_mode == MODE_ENOSPC && data_or_null && g_after_bytes > before) {
    // as a disk that fills: a short write of what still fits; the next write fails
    size_t head = (size_t)(g_after_bytes - before);
    if (head > count) head = count;
    ssize_t w = positional ? syscall(SYS_pwrite64, fd, data_or_null, head, offset) : syscall(SYS_write, fd, data_or_null, head);
    answer->result = w;
    return 0;
  }
  if (g_mode == MODE_ENOSPC) {
    errno = ENOSPC;
    answer->result = -1;
  } else {
    answer->result = (ssize_t)count;  // MODE_DROP: a lie
  }
  return 0;
}

ssize_t write(int fd, const void* buf, size_t count) {
  REAL(write);
  Answer a;
  if (!decide(fd, count, buf, 0, 0, &a)) return a.result;
  return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  REAL(pwrite);
  Answer a;
  if (!decide(fd, count, buf, offset, 1, &a)) return a.result;
  return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off64_t offset) {
  REAL(pwrite64);
  Answer a;
  if (!decide(fd, count, buf, (off_t)offset, 1, &a)) return a.result;
  return real_pwrite64(fd, buf, count, offset);
}

static size_t iov_bytes(const struct iovec* iov, int n) {
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += iov[i].iov_len;
  return total;
}

// a vectored write that must be cut: gather it into one buffer so kill mode can write the head and
// enospc mode the part that still fits (libstdc++ writes lines of 1 KiB or more with writev)
static ssize_t vectored(int fd, const struct iovec* iov, int n, off_t offset, int positional, int* handled) {
  size_t total = iov_bytes(iov, n);
  *handled = 0;
  configure();
  if (g_mode == MODE_OFF || g_on != ON_WRITE || total == 0) return 0;
  char* flat = NULL;
  if (g_mode == MODE_KILL || g_mode == MODE_ENOSPC) {
    flat = malloc(total);
    if (flat) {
      size_t at = 0;
      for (int i = 0; i < n; ++i) {
        memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
      }
    }
  }
  Answer a;
  int real = decide(fd, total, flat, offset, positional, &a);
  free(flat);
  if (real) return 0;
  *handled = 1;
  return a.result;
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  REAL(writev);
  int handled;
  ssize_t r = vectored(fd, iov, iovcnt, 0, 0, &handled);
  return handled ? r : real_writev(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec* iov, int iovcnt, off_t offset) {
  REAL(pwritev);
  int handled;
  ssize_t r = vectored(fd, iov, iovcnt, offset, 1, &handled);
  return handled ? r : real_pwritev(fd, iov, iovcnt, offset);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int iovcnt, off64_t offset) {
  REAL(pwritev64);
  int handled;
  ssize_t r = vectored(fd, iov, iovcnt, (off_t)offset, 1, &handled);
  return handled ? r : real_pwritev64(fd, iov, iovcnt, offset);
}

// stdio buffers inside glibc, whose own flushes do not come back through write(): judge fwrite itself
size_t fwrite(const void* ptr, size_t size, size_t nmemb, FILE* stream) {
  REAL(fwrite);
  size_t bytes = size * nmemb;
  int fd = fileno(stream);
  if (fd >= 0 && bytes > 0) {
    configure();
    if (g_mode != MODE_OFF && g_on == ON_WRITE) {
      if (g_mode != MODE_DROP) fflush(stream);  // what was buffered before reaches the file first
      Answer a;
      if (!decide(fd, bytes, ptr, 0, 0, &a)) return a.result < 0 ? 0 : (size_t)a.result / size;
    }
  }
  return real_fwrite(ptr, size, nmemb, stream);
}

// file copies (std::filesystem::copy_file): sendfile / copy_file_range into a matching file
ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  REAL(sendfile);
  Answer a;
  if (!decide(out_fd, count, NULL, 0, 0, &a)) return a.result;
  return real_sendfile(out_fd, in_fd, offset, count);
}

ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  REAL(sendfile64);
  Answer a;
  if (!decide(out_fd, count, NULL, 0, 0, &a)) return a.result;
  return real_sendfile64(out_fd, in_fd, offset, count);
}

ssize_t copy_file_range(int fd_in, off64_t* off_in, int fd_out, off64_t* off_out, size_t len, unsigned int flags) {
  REAL(copy_file_range);
  Answer a;
  if (!decide(fd_out, len, NULL, 0, 0, &a)) return a.result;
  return real_copy_file_range(fd_in, off_in, fd_out, off_out, len, flags);
}

// ---- renames -------------------------------------------------------------------------------------
static int rename_matches(const char* from, const char* to) {
  configure();
  if (g_mode == MODE_OFF || g_on != ON_RENAME) return 0;
  if (!(from && strstr(from, g_substr)) && !(to && strstr(to, g_substr))) return 0;
  unsigned long long calls = __atomic_fetch_add(&g_calls, 1, __ATOMIC_SEQ_CST);
  return calls >= g_after_calls;
}

static int before_rename(const char* from, const char* to) {
  if (!rename_matches(from, to)) return 0;
  if (g_mode == MODE_ENOSPC) {
    log_fault("ENOSPC on rename", to, 0);
    errno = ENOSPC;
    return -1;
  }
  return 1;  // kill after it (drop: treated as kill)
}

static int after_rename(int rc, const char* to) {
  if (rc == 0) {
    log_fault("SIGKILL after rename", to, 0);
    raise(SIGKILL);
    for (;;) pause();
  }
  return rc;
}

int rename(const char* from, const char* to) {
  REAL(rename);
  int d = before_rename(from, to);
  if (d < 0) return -1;
  int rc = real_rename(from, to);
  return d ? after_rename(rc, to) : rc;
}

int renameat(int olddirfd, const char* from, int newdirfd, const char* to) {
  REAL(renameat);
  int d = before_rename(from, to);
  if (d < 0) return -1;
  int rc = real_renameat(olddirfd, from, newdirfd, to);
  return d ? after_rename(rc, to) : rc;
}

int renameat2(int olddirfd, const char* from, int newdirfd, const char* to, unsigned int flags) {
  REAL(renameat2);
  int d = before_rename(from, to);
  if (d < 0) return -1;
  int rc = real_renameat2 ? real_renameat2(olddirfd, from, newdirfd, to, flags)
                          : (int)syscall(SYS_renameat2, olddirfd, from, newdirfd, to, flags);
  return d ? after_rename(rc, to) : rc;
}

// ---- removals ------------------------------------------------------------------------------------
// a removal that matches: 1 = kill once it succeeded
static int unlink_matches(int dirfd, const char* path, char* full, size_t size) {
  configure();
  if (g_mode == MODE_OFF || g_on != ON_UNLINK || !path) return 0;
  full[0] = '\0';
  if (path[0] != '/' && dirfd != AT_FDCWD) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, full, size - 2);
    if (n > 0) {
      full[n] = '/';
      full[n + 1] = '\0';
    }
  }
  strncat(full, path, size - strlen(full) - 1);
  if (!strstr(full, g_substr)) return 0;
  unsigned long long calls = __atomic_fetch_add(&g_calls, 1, __ATOMIC_SEQ_CST);
  return calls >= g_after_calls;
}

static int after_unlink(int rc, const char* full) {
  if (rc == 0) {
    log_fault("SIGKILL after removing", full, 0);
    raise(SIGKILL);
    for (;;) pause();
  }
  return rc;
}

int unlink(const char* path) {
  REAL(unlink);
  char full[PATH_MAX * 2];
  int d = unlink_matches(AT_FDCWD, path, full, sizeof full);
  int rc = real_unlink(path);
  return d ? after_unlink(rc, full) : rc;
}

int unlinkat(int dirfd, const char* path, int flags) {
  REAL(unlinkat);
  char full[PATH_MAX * 2];
  int d = unlink_matches(dirfd, path, full, sizeof full);
  int rc = real_unlinkat(dirfd, path, flags);
  return d ? after_unlink(rc, full) : rc;
}

int rmdir(const char* path) {
  REAL(rmdir);
  char full[PATH_MAX * 2];
  int d = unlink_matches(AT_FDCWD, path, full, sizeof full);
  int rc = real_rmdir(path);
  return d ? after_unlink(rc, full) : rc;
}

int remove(const char* path) {
  REAL(remove);
  char full[PATH_MAX * 2];
  int d = unlink_matches(AT_FDCWD, path, full, sizeof full);
  int rc = real_remove(path);
  return d ? after_unlink(rc, full) : rc;
}
