// The C ABI's handle and its exception barrier, shared by the c_api*.cpp
// files of libmuster. Not installed.
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "muster/client.hpp"
#include "muster/muster.h"

struct muster_client {
  std::string endpoint;
  std::unique_ptr<muster::Client> client;
  int code = 0;
  std::string message;
};

namespace muster::capi {

// Runs f, turning every exception into the handle's error state.
template <class F>
int guarded(muster_client* c, F&& f) {
  if (!c) return static_cast<int>(muster::ErrorCode::kInvalidArgument);
  try {
    if (!c->client)
      c->client = std::make_unique<muster::Client>(muster::ClientOptions{c->endpoint});
    std::forward<F>(f)(*c->client);
    c->code = 0;
    c->message.clear();
  } catch (const muster::Error& e) {
    c->code = static_cast<int>(e.code());
    c->message = e.what();
  } catch (const std::bad_alloc&) {
    c->code = static_cast<int>(muster::ErrorCode::kInternal);
    c->message = "out of memory";
  } catch (const std::exception& e) {
    c->code = static_cast<int>(muster::ErrorCode::kInternal);
    c->message = e.what();
  }
  return c->code;
}

inline muster::Error null_arg(const char* what) {
  return muster::Error(muster::ErrorCode::kInvalidArgument,
                       std::string(what) + " must not be NULL");
}

// A malloc'd, NUL-terminated copy of s in *value (when value is set; free
// with muster_free), its length in *len.
inline void copy_out(const std::string& s, void** value, size_t* len) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = 0;
  if (value)
    *value = p;
  else
    std::free(p);
  if (len) *len = s.size();
}

// A C timeout: < 0 is the default.
inline std::optional<std::chrono::milliseconds> timeout(int64_t ms) {
  if (ms < 0) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

}  // namespace muster::capi
