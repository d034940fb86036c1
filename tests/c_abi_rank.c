/* A rank written in C against libmuster's C ABI, run by `muster run -n 2`:
 * joins from the environment, exchanges values through the store, passes a
 * barrier and checks the error path. Exit code 0 only if everything held. */
#include <muster/muster.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                         \
  do {                                                      \
    if (!(cond)) {                                          \
      fprintf(stderr, "c_abi_rank: %s failed: %s\n", #cond, \
              c ? muster_error_message(c) : "no handle");   \
      return 1;                                             \
    }                                                       \
  } while (0)

int main(void) {
  muster_client* c = muster_client_new(NULL);
  CHECK(c != NULL);
  CHECK(muster_error_code(c) == 0);
  muster_rank_info me;
  CHECK(muster_join_env(c, &me) == 0);
  CHECK(me.world_size == 2);
  CHECK(muster_is_master(c) == (me.rank == 0));
  CHECK(muster_is_local_master(c) == (me.local_rank == 0));

  char key[32], value[32];
  snprintf(key, sizeof key, "c/%u", me.rank);
  snprintf(value, sizeof value, "from-%u", me.rank);
  CHECK(muster_store_set(c, key, value, strlen(value)) == 0);
  int64_t n = 0;
  CHECK(muster_store_add(c, "c/count", 1, &n) == 0);
  CHECK(muster_barrier(c, "c-abi", 10000) == 0);

  snprintf(key, sizeof key, "c/%u", 1 - me.rank);
  void* got = NULL;
  size_t len = 0;
  CHECK(muster_store_get(c, key, 5000, &got, &len) == 0);
  snprintf(value, sizeof value, "from-%u", 1 - me.rank);
  CHECK(len == strlen(value) && memcmp(got, value, len) == 0);
  muster_free(got);
  CHECK(muster_store_add(c, "c/count", 0, &n) == 0 && n == 2);

  /* Errors come back as a code and a sentence, never as a crash. */
  const char* keys[] = {"never"};
  CHECK(muster_store_wait(c, keys, 1, 50) == 7 /* timeout */);
  CHECK(strstr(muster_error_message(c), "never") != NULL);
  CHECK(muster_store_set(c, NULL, "x", 1) == 4 /* invalid_argument */);

  char* json = NULL;
  CHECK(muster_status_json(c, &json) == 0);
  CHECK(strstr(json, "\"jobs\":[") != NULL);
  muster_free(json);
  CHECK(muster_barrier(c, "c-abi-done", 10000) == 0);
  if (me.rank == 0) printf("c abi: 2 ranks passed\n");
  muster_client_free(c);
  return 0;
}
