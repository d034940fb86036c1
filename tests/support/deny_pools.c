// LD_PRELOAD for musterd in tests: the daemon cannot reach its ranks'
// broadcast pools (an open of /proc/<pid>/fd/<n> with O_PATH fails with
// EACCES, as for a daemon not allowed to look into its ranks), so that the
// ranks' fallback to sending the bytes themselves is exercised.
// Both symbols are defined here: the build's 64-bit file offsets would
// make `open` an alias of open64.
#undef _FILE_OFFSET_BITS
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>

static int denied(const char* path, int flags) {
  return (flags & O_PATH) && strncmp(path, "/proc/", 6) == 0 && strstr(path, "/fd/") != NULL;
}

static int pass(const char* name, const char* path, int flags, va_list ap) {
  int (*real)(const char*, int, ...);
  *(void**)&real = dlsym(RTLD_NEXT, name);  // POSIX's idiom
  if (flags & (O_CREAT | O_TMPFILE)) return real(path, flags, va_arg(ap, int));
  return real(path, flags);
}

// The real `name` unless path is a pool.
static int shim(const char* name, const char* path, int flags, va_list ap) {
  if (denied(path, flags)) {
    errno = EACCES;
    return -1;
  }
  return pass(name, path, flags, ap);
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int fd = shim("open", path, flags, ap);
  va_end(ap);
  return fd;
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  int fd = shim("open64", path, flags, ap);
  va_end(ap);
  return fd;
}
