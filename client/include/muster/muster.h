/* libmuster's C ABI: an opaque handle, an int status return (0 = success,
 * else a muster error code, see muster/error.hpp) and the last error's text
 * on the handle. No exception crosses this boundary. Usable from C and from
 * Python's ctypes. A handle is not thread-safe. */
#ifndef MUSTER_MUSTER_H
#define MUSTER_MUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "muster/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct muster_client muster_client;

typedef struct muster_rank_info {
  char job[129];
  uint32_t rank;
  uint32_t local_rank;
  uint32_t world_size;
  uint32_t local_world_size;
  uint32_t node_rank;
  uint32_t num_nodes;
  int32_t device; /* -1: no GPU */
  uint64_t generation;
} muster_rank_info;

/* Opens a handle; endpoint NULL or "" means MUSTER_ENDPOINT / the default.
 * Returns NULL only when out of memory; check muster_error_code() after. @since 0.1 */
muster_client* muster_client_new(const char* endpoint);
/* Closes a handle (NULL is ignored). @since 0.1 */
void muster_client_free(muster_client* c);

/* The last call's status and sentence ("" after a success). @since 0.1 */
int muster_error_code(const muster_client* c);
/* @since 0.1 */
const char* muster_error_message(const muster_client* c);

/* A round trip to the daemon. @since 0.1 */
int muster_ping(muster_client* c);
/* Takes a local rank of job (and a GPU lease when wants_gpu); local_rank -1:
 * any free one. @since 0.1 */
int muster_join(muster_client* c, const char* job, uint32_t local_world_size, int wants_gpu,
                int local_rank, muster_rank_info* out);
/* muster_join into the job of another owner (a uid; -1: the caller's own).
 * Only root may name another owner, and only from a process that job's
 * launcher registered (a worker of `muster run --owner`). @since 0.3 */
int muster_join_owner(muster_client* c, const char* job, int64_t owner, uint32_t local_world_size,
                      int wants_gpu, int local_rank, muster_rank_info* out);
/* Joins with the variables `muster run` sets. @since 0.1 */
int muster_join_env(muster_client* c, muster_rank_info* out);
/* The UUID of the GPU leased to this rank ("GPU-…", as nvidia-smi -L
 * writes it) into out, NUL-terminated; "" for a rank without a GPU or on a
 * daemon whose GPU source has no UUIDs. An error when the handle has not
 * joined, or out (size bytes; 96 is enough) is too small. @since 0.1 */
int muster_device_uuid(muster_client* c, char* out, size_t size);
/* Gives the rank and its lease back. @since 0.1 */
int muster_leave(muster_client* c);
/* 1 or 0; -1 with an error set when the handle has not joined. @since 0.1 */
int muster_is_master(muster_client* c);
/* Like muster_is_master, for local rank 0. @since 0.1 */
int muster_is_local_master(muster_client* c);

/* timeout_ms < 0: the default (300 s or MUSTER_TIMEOUT_S). @since 0.1 */
int muster_barrier(muster_client* c, const char* name, int64_t timeout_ms);
/* Sets key to the len bytes at value. @since 0.1 */
int muster_store_set(muster_client* c, const char* key, const void* value, size_t len);
/* Waits (up to timeout_ms) for key; *value is malloc'd (free with
 * muster_free), NUL-terminated for convenience. @since 0.1 */
int muster_store_get(muster_client* c, const char* key, int64_t timeout_ms, void** value,
                     size_t* len);
/* Adds delta to the integer at key; *result: the new value. @since 0.1 */
int muster_store_add(muster_client* c, const char* key, int64_t delta, int64_t* result);
/* torch's Store.compare_set: desired replaces expected; *value (malloc'd)
 * is what key holds after. @since 0.1 */
int muster_store_compare_set(muster_client* c, const char* key, const void* expected,
                             size_t expected_len, const void* desired, size_t desired_len,
                             void** value, size_t* len);
/* *deleted: 1 when key existed. @since 0.1 */
int muster_store_delete(muster_client* c, const char* key, int* deleted);
/* Waits (up to timeout_ms) until all n keys exist. @since 0.1 */
int muster_store_wait(muster_client* c, const char* const* keys, size_t n, int64_t timeout_ms);
/* *count: how many keys start with prefix ("" or NULL: every key).
 * @since 0.1 */
int muster_store_num_keys(muster_client* c, const char* prefix, int64_t* count);
/* A new handle on the same daemon acting for c's job and rank (torch's
 * Store.clone), for another thread; NULL when out of memory. @since 0.2 */
muster_client* muster_client_clone(muster_client* c);
/* torch's newer Store API, with torch's meaning. Appends len bytes to
 * key's value (an absent key is created). @since 0.2 */
int muster_store_append(muster_client* c, const char* key, const void* value, size_t len);
/* Sets keys[i] to the lens[i] bytes at values[i], all n in one step.
 * @since 0.1 */
int muster_store_multi_set(muster_client* c, const char* const* keys, const void* const* values,
                           const size_t* lens, size_t n);
/* Waits (up to timeout_ms) until all n keys exist; values[i] (malloc'd,
 * free each with muster_free) and lens[i] are keys[i]'s. @since 0.2 */
int muster_store_multi_get(muster_client* c, const char* const* keys, size_t n, int64_t timeout_ms,
                           void** values, size_t* lens);
/* Appends an item to the queue at key. @since 0.2 */
int muster_store_queue_push(muster_client* c, const char* key, const void* value, size_t len);
/* Takes the queue's first item (*value malloc'd), waiting up to timeout_ms
 * (< 0: the default); 0 does not wait: MUSTER not_found when empty.
 * @since 0.1 */
int muster_store_queue_pop(muster_client* c, const char* key, int64_t timeout_ms, void** value,
                           size_t* len);
/* *len: items in the queue at key. @since 0.2 */
int muster_store_queue_len(muster_client* c, const char* key, int64_t* len);
/* The keys that start with prefix (NULL or "": all), sorted: *keys is a
 * malloc'd array of *n malloc'd strings (free each, then the array, with
 * muster_free). @since 0.2 */
int muster_store_list_keys(muster_client* c, const char* prefix, char*** keys, size_t* n);
/* `muster status --json`'s document, malloc'd. @since 0.1 */
int muster_status_json(muster_client* c, char** json);

/* Model broadcast, through shared memory on one node (as the C++ API's
 * muster::broadcast and muster::sync_model). Collectives: every rank of the
 * job calls them in the same order. On error the buffers' contents are
 * unspecified. */
typedef struct muster_buffer {
  void* data;
  size_t size;      /* bytes */
  int type;         /* 0 bytes, 1 float32, 2 float64 */
  int is_parameter; /* nonzero: a parameter; zero: a buffer (e.g. running stats) */
} muster_buffer;
/* Every rank ends with root's size bytes. @since 0.1 */
int muster_broadcast(muster_client* c, void* data, size_t size, uint32_t root);
/* One collective for all n buffers: rank 0's bytes everywhere, or the
 * average across ranks for float parameters (reduce_parameters) or float
 * buffers (reduce_buffers). @since 0.1 */
int muster_sync_model(muster_client* c, muster_buffer* bufs, size_t n, int reduce_parameters,
                      int reduce_buffers);
/* This rank's indices of torch's DistributedSampler (num_replicas = the
 * job's world size), bit-identical to torch; needs a joined handle.
 * *indices is malloc'd (free with muster_free), *count entries. @since 0.1 */
int muster_sampler_shard(muster_client* c, uint64_t dataset_size, uint64_t epoch, uint64_t seed,
                         int shuffle, int drop_last, int64_t** indices, size_t* count);
/* The same, resumed: `consumed` indices of the epoch's permutation (torch's
 * order, unpadded; <= dataset_size) are already used, and the ranks share
 * the rest as torch shares a whole epoch (padded by cycling the rest, or
 * truncated with drop_last). consumed = 0 is muster_sampler_shard.
 * @since 0.1 */
int muster_sampler_shard_from(muster_client* c, uint64_t dataset_size, uint64_t epoch,
                              uint64_t seed, int shuffle, int drop_last, uint64_t consumed,
                              int64_t** indices, size_t* count);
/* Resumable samplers: records with the daemon that `consumed` indices of
 * `epoch` are used by the sampler (dataset_size, seed, shuffle), for the
 * later generations of this muster run; the last commit wins. A job that
 * spans nodes keeps it with its coordinator. @since 0.1 */
int muster_sampler_commit(muster_client* c, uint64_t dataset_size, uint64_t epoch, uint64_t seed,
                          int shuffle, int drop_last, uint64_t consumed);
/* That sampler's last commit in this run: *found = 1 and its epoch and
 * consumed, or *found = 0 (then both 0). @since 0.1 */
int muster_sampler_resume(muster_client* c, uint64_t dataset_size, uint64_t seed, int shuffle,
                          int* found, uint64_t* epoch, uint64_t* consumed);

/* Frees what the calls above malloc'd. @since 0.1 */
void muster_free(void* p);

#ifdef __cplusplus
}
#endif

#endif
