/* libmuster version, for compile-time checks (libmpdclient's pattern). */
#ifndef MUSTER_VERSION_H
#define MUSTER_VERSION_H

#define MUSTER_MAJOR_VERSION 0
#define MUSTER_MINOR_VERSION 1
#define MUSTER_PATCH_VERSION 0

/* True when the library is at least MAJOR.MINOR.PATCH. */
#define MUSTER_CHECK_VERSION(major, minor, patch) \
  ((major) < MUSTER_MAJOR_VERSION ||              \
   ((major) == MUSTER_MAJOR_VERSION &&            \
    ((minor) < MUSTER_MINOR_VERSION ||            \
     ((minor) == MUSTER_MINOR_VERSION && (patch) <= MUSTER_PATCH_VERSION))))

#endif
