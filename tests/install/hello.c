/* Built against an installed libmuster (muster.pc) by install_test.sh and run
 * as a 2-rank job: join, exchange a value, meet at a barrier. */
#include <muster/muster.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  muster_client* c = muster_client_new(NULL);
  muster_rank_info me;
  if (!c || muster_join_env(c, &me) != 0) {
    fprintf(stderr, "hello.c: join failed: %s\n", c ? muster_error_message(c) : "no memory");
    return 1;
  }
  char key[32];
  snprintf(key, sizeof key, "c/%u", me.rank);
  void* got = NULL;
  size_t len = 0;
  int ok = muster_store_set(c, key, "hi", 2) == 0 && muster_barrier(c, "c", 10000) == 0;
  snprintf(key, sizeof key, "c/%u", 1 - me.rank);
  ok = ok && muster_store_get(c, key, 5000, &got, &len) == 0 && len == 2 &&
       memcmp(got, "hi", 2) == 0;
  muster_free(got);
  if (!ok) {
    fprintf(stderr, "hello.c: rank %u: %s\n", me.rank, muster_error_message(c));
    muster_client_free(c);
    return 1;
  }
  printf("hello.c: rank %u of %u ok\n", me.rank, me.world_size);
  muster_client_free(c);
  return 0;
}
