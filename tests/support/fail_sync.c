// LD_PRELOAD for musterd in tests: fsync and fdatasync fail with EIO while
// the file named by MUSTER_FAIL_SYNC_FLAG exists, as a failing disk's would.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
  const char* flag = getenv("MUSTER_FAIL_SYNC_FLAG");
  return flag && *flag && access(flag, F_OK) == 0;
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) *(void**)&real = dlsym(RTLD_NEXT, "fsync");  // POSIX's idiom
  if (failing()) {
    errno = EIO;
    return -1;
  }
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) *(void**)&real = dlsym(RTLD_NEXT, "fdatasync");
  if (failing()) {
    errno = EIO;
    return -1;
  }
  return real(fd);
}
