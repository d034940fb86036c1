// C ABI for the store requests added after 0.1 (muster.h, "@since 0.2").
#include <new>
#include <vector>

#include "c_api_guard.hpp"
#include "muster/client.hpp"
#include "muster/muster.h"

using muster::capi::copy_out;
using muster::capi::guarded;
using muster::capi::null_arg;
using muster::capi::timeout;

namespace {
std::vector<std::string> key_list(const char* const* keys, size_t n) {
  if (!keys && n) throw null_arg("keys");
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    if (!keys[i]) throw null_arg("keys[i]");
    out.emplace_back(keys[i]);
  }
  return out;
}

std::string bytes(const void* p, size_t len) {
  if (!p && len) throw null_arg("value");
  return len ? std::string(static_cast<const char*>(p), len) : std::string();
}
}  // namespace

extern "C" {

muster_client* muster_client_clone(muster_client* c) {
  if (!c) return nullptr;
  auto* copy = new (std::nothrow) muster_client;
  if (!copy) return nullptr;
  copy->endpoint = c->endpoint;
  // A handle whose connection failed keeps the error, as muster_client_new's.
  if (guarded(c, [&](muster::Client& cl) {
        copy->client = std::make_unique<muster::Client>(cl.clone());
      }) != 0) {
    copy->code = c->code;
    copy->message = c->message;
  }
  return copy;
}

int muster_store_num_keys(muster_client* c, const char* prefix, int64_t* count) {
  return guarded(c, [&](muster::Client& cl) {
    if (!count) throw null_arg("count");
    *count = cl.num_keys(prefix ? prefix : "");
  });
}

int muster_store_append(muster_client* c, const char* key, const void* value, size_t len) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    cl.append(key, bytes(value, len));
  });
}

int muster_store_multi_set(muster_client* c, const char* const* keys, const void* const* values,
                           const size_t* lens, size_t n) {
  return guarded(c, [&](muster::Client& cl) {
    if (n && (!values || !lens)) throw null_arg("values and lens");
    std::vector<std::string> vs;
    for (size_t i = 0; i < n; ++i) vs.push_back(bytes(values[i], lens[i]));
    cl.multi_set(key_list(keys, n), vs);
  });
}

int muster_store_multi_get(muster_client* c, const char* const* keys, size_t n, int64_t timeout_ms,
                           void** values, size_t* lens) {
  return guarded(c, [&](muster::Client& cl) {
    if (n && (!values || !lens)) throw null_arg("values and lens");
    auto vs = cl.multi_get(key_list(keys, n), timeout(timeout_ms));
    for (size_t i = 0; i < vs.size(); ++i) copy_out(vs[i], &values[i], &lens[i]);
  });
}

int muster_store_queue_push(muster_client* c, const char* key, const void* value, size_t len) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    cl.queue_push(key, bytes(value, len));
  });
}

int muster_store_queue_pop(muster_client* c, const char* key, int64_t timeout_ms, void** value,
                           size_t* len) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    copy_out(cl.queue_pop(key, timeout(timeout_ms)), value, len);
  });
}

int muster_store_queue_len(muster_client* c, const char* key, int64_t* len) {
  return guarded(c, [&](muster::Client& cl) {
    if (!key) throw null_arg("key");
    if (!len) throw null_arg("len");
    *len = cl.queue_len(key);
  });
}

int muster_store_list_keys(muster_client* c, const char* prefix, char*** keys, size_t* n) {
  return guarded(c, [&](muster::Client& cl) {
    if (!keys || !n) throw null_arg("keys and n");
    auto ks = cl.list_keys(prefix ? prefix : "");
    auto** arr = static_cast<char**>(std::malloc((ks.size() ? ks.size() : 1) * sizeof(char*)));
    if (!arr) throw std::bad_alloc();
    for (size_t i = 0; i < ks.size(); ++i) {
      void* p = nullptr;
      try {
        copy_out(ks[i], &p, nullptr);
      } catch (...) {
        for (size_t j = 0; j < i; ++j) std::free(arr[j]);
        std::free(arr);
        throw;
      }
      arr[i] = static_cast<char*>(p);
    }
    *keys = arr;
    *n = ks.size();
  });
}

}  // extern "C"
