#include <cstdlib>
#include <cstring>
#include <new>

#include "c_api_guard.hpp"
#include "muster/client.hpp"
#include "muster/muster.h"

namespace {

using muster::capi::copy_out;
using muster::capi::guarded;
using muster::capi::null_arg;
using muster::capi::timeout;

void fill(const muster::RankInfo& r, muster_rank_info* out) {
  if (!out) return;
  std::memset(out, 0, sizeof *out);
  std::strncpy(out->job, r.job.c_str(), sizeof out->job - 1);
  out->rank = r.rank;
  out->local_rank = r.local_rank;
  out->world_size = r.world_size;
  out->local_world_size = r.local_world_size;
  out->node_rank = r.node_rank;
  out->num_nodes = r.num_nodes;
  out->device = r.device;
  out->generation = r.generation;
}

}  // namespace

extern "C" {

muster_client* muster_client_new(const char* endpoint) {
  auto* c = new (std::nothrow) muster_client;
  if (!c) return nullptr;
  c->endpoint = endpoint ? endpoint : "";
  // Connect now so a bad endpoint shows up at once.
  guarded(c, [](muster::Client&) {});
  return c;
}

void muster_client_free(muster_client* c) {
  delete c;
}
int muster_error_code(const muster_client* c) {
  return c ? c->code : 4;
}
const char* muster_error_message(const muster_client* c) {
  return c ? c->message.c_str() : "muster_client is NULL";
}
void muster_free(void* p) {
  std::free(p);
}

int muster_ping(muster_client* c) {
  return guarded(c, [](muster::Client& cl) { cl.ping(); });
}

int muster_join(muster_client* c, const char* job, uint32_t local_world_size, int wants_gpu,
                int local_rank, muster_rank_info* out) {
  return guarded(c, [&](muster::Client& cl) {
    if (!job) throw null_arg("job");
    fill(cl.join({job, local_world_size, wants_gpu != 0, local_rank}), out);
  });
}

int muster_join_owner(muster_client* c, const char* job, int64_t owner, uint32_t local_world_size,
                      int wants_gpu, int local_rank, muster_rank_info* out) {
  return guarded(c, [&](muster::Client& cl) {
    if (!job) throw null_arg("job");
    fill(cl.join({job, local_world_size, wants_gpu != 0, local_rank, owner}), out);
  });
}

int muster_join_env(muster_client* c, muster_rank_info* out) {
  return guarded(c, [&](muster::Client& cl) { fill(cl.join_from_env(), out); });
}

int muster_device_uuid(muster_client* c, char* out, size_t size) {
  return guarded(c, [&](muster::Client& cl) {
    if (!out) throw null_arg("out");
    const std::string& uuid = cl.rank_info().device_uuid;
    if (uuid.size() + 1 > size)
      throw muster::Error(muster::ErrorCode::kInvalidArgument,
                          "muster_device_uuid: the buffer holds " + std::to_string(size) +
                              " bytes; the UUID needs " + std::to_string(uuid.size() + 1));
    std::memcpy(out, uuid.c_str(), uuid.size() + 1);
  });
}

int muster_leave(muster_client* c) {
  return guarded(c, [](muster::Client& cl) { cl.leave(); });
}

int muster_is_master(muster_client* c) {
  int r = -1;
  guarded(c, [&](muster::Client& cl) { r = cl.is_master() ? 1 : 0; });
  return r;
}

int muster_is_local_master(muster_client* c) {
  int r = -1;
  guarded(c, [&](muster::Client& cl) { r = cl.is_local_master() ? 1 : 0; });
  return r;
}

int muster_barrier(muster_client* c, const char* name, int64_t timeout_ms) {
  return guarded(
      c, [&](muster::Client& cl) { cl.barrier(name ? name : "default", timeout(timeout_ms)); });
}

int muster_store_set(muster_client* c, const char* key, const void* value, size_t len) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    if (!value && len) throw null_arg("value");
    cl.set(key, std::string(static_cast<const char*>(value), len));
  });
}

int muster_store_get(muster_client* c, const char* key, int64_t timeout_ms, void** value,
                     size_t* len) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    copy_out(cl.get(key, timeout(timeout_ms)), value, len);
  });
}

int muster_store_add(muster_client* c, const char* key, int64_t delta, int64_t* result) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    auto v = cl.add(key, delta);
    if (result) *result = v;
  });
}

int muster_store_compare_set(muster_client* c, const char* key, const void* expected,
                             size_t expected_len, const void* desired, size_t desired_len,
                             void** value, size_t* len) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    std::string e(expected ? static_cast<const char*>(expected) : "", expected ? expected_len : 0);
    std::string d(desired ? static_cast<const char*>(desired) : "", desired ? desired_len : 0);
    copy_out(cl.compare_set(key, e, d), value, len);
  });
}

int muster_store_delete(muster_client* c, const char* key, int* deleted) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    bool d = cl.remove(key);
    if (deleted) *deleted = d ? 1 : 0;
  });
}

int muster_store_wait(muster_client* c, const char* const* keys, size_t n, int64_t timeout_ms) {
  return guarded(c, [&](muster::Client& cl) {
    if (!keys && n) throw null_arg("keys");
    std::vector<std::string> ks;
    for (size_t i = 0; i < n; ++i) {
      if (!keys[i]) throw null_arg("keys[i]");
      ks.emplace_back(keys[i]);
    }
    cl.wait(ks, timeout(timeout_ms));
  });
}

int muster_status_json(muster_client* c, char** json) {
  return guarded(c, [&](muster::Client& cl) {
    if (!json) throw null_arg("json");
    void* p = nullptr;
    copy_out(muster::to_json(cl.status()), &p, nullptr);
    *json = static_cast<char*>(p);
  });
}

}  // extern "C"
