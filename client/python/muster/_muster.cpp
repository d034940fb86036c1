// muster._muster: pybind11 bindings over libmuster's C++ API. The Python
// package (muster/__init__.py and friends) builds the seed's calls on top.
//
// Every call that talks to the daemon or waits releases the GIL; a mutex per
// Client keeps libmuster's one-thread-at-a-time rule (taken after the GIL is
// released, so a thread waiting in get() never blocks the interpreter).
#include <pybind11/chrono.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"
#include "muster/error.hpp"
#include "muster_config.h"

namespace py = pybind11;
using Timeout = std::optional<std::chrono::duration<double>>;

namespace {

PyObject* g_error = nullptr;  // muster.Error, created at import, never freed

std::optional<std::chrono::milliseconds> to_ms(const Timeout& t) {
  if (!t) return std::nullopt;
  if (t->count() < 0) throw py::value_error("timeout must not be negative");
  return std::chrono::duration_cast<std::chrono::milliseconds>(*t);
}

// A writable, contiguous view of a Python buffer (bytearray, numpy array,
// memoryview, tensor.numpy()); released with the GIL held.
class WritableBuffer {
 public:
  explicit WritableBuffer(const py::handle& obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) != 0)
      throw py::error_already_set();
    held_ = true;
  }
  WritableBuffer(WritableBuffer&& o) noexcept : view_(o.view_), held_(o.held_) { o.held_ = false; }
  WritableBuffer(const WritableBuffer&) = delete;
  WritableBuffer& operator=(const WritableBuffer&) = delete;
  WritableBuffer& operator=(WritableBuffer&&) = delete;
  ~WritableBuffer() {
    if (held_) PyBuffer_Release(&view_);
  }
  void* data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

muster::Buffer::Type parse_type(const std::string& t) {
  using T = muster::Buffer::Type;
  if (t == "bytes") return T::kBytes;
  if (t == "float32") return T::kFloat32;
  if (t == "float64") return T::kFloat64;
  throw py::value_error("buffer type must be 'bytes', 'float32' or 'float64', not '" + t + "'");
}

std::string as_bytes(const py::handle& v) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();  // UTF-8
  if (py::isinstance<py::bytes>(v)) return v.cast<std::string>();
  if (py::isinstance<py::bytearray>(v))
    return py::bytearray(v.cast<py::object>()).cast<std::string>();
  throw py::type_error("store values are str or bytes");
}

class PyClient {
 public:
  PyClient(const std::string& endpoint, double request_timeout_s, const Timeout& wait_timeout) {
    muster::ClientOptions o;
    o.endpoint = endpoint;
    o.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
    if (auto ms = to_ms(wait_timeout)) o.wait_timeout = *ms;
    c_ = std::make_unique<muster::Client>(std::move(o));
  }

  explicit PyClient(muster::Client c) : c_(std::make_unique<muster::Client>(std::move(c))) {}

  // Runs f(client) without the GIL, one thread at a time.
  template <class F>
  auto locked(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(mu_);
    return f(*c_);
  }

  muster::Client& raw() { return *c_; }
  std::mutex& mutex() { return mu_; }

 private:
  std::mutex mu_;
  std::unique_ptr<muster::Client> c_;
};

py::bytes to_py(const std::string& s) {
  return py::bytes(s.data(), s.size());
}

// f(client) for a method without arguments, without the GIL.
template <auto F>
auto locked_call(PyClient& c) {
  return c.locked([](muster::Client& x) { return (x.*F)(); });
}

// get(key, timeout) and the like: the value a call on (key, timeout) reads,
// as bytes, without the GIL.
template <class F>
auto key_read(F f) {
  return [f](PyClient& c, const std::string& key, const Timeout& t) {
    auto ms = to_ms(t);
    return to_py(c.locked([&](muster::Client& x) { return f(x, key, ms); }));
  };
}

void sync_model(PyClient& c, const std::vector<muster::Buffer>& bufs, bool reduce_parameters,
                bool reduce_buffers) {
  c.locked([&](auto& x) { muster::sync_model(x, bufs, reduce_parameters, reduce_buffers); });
}

// muster.Error(message) with .code (int) and .name ("timeout", ...).
void def_errors(py::module_& m) {
  py::dict attrs;
  attrs["__doc__"] =
      "A muster failure: .code is the protocol's error code (int), .name its stable name "
      "(e.g. 'timeout'), str() the sentence.";
  attrs["code"] = py::int_(static_cast<int>(muster::ErrorCode::kInternal));
  attrs["name"] = py::str("internal");
  attrs["__module__"] = py::str("muster");
  g_error = PyErr_NewException("muster.Error", PyExc_RuntimeError, attrs.ptr());
  if (!g_error) throw py::error_already_set();
  m.attr("Error") = py::handle(g_error);
  py::dict codes;
  for (int c = 0; c <= static_cast<int>(muster::ErrorCode::kRestarted); ++c)
    codes[py::str(muster::error_name(static_cast<muster::ErrorCode>(c)))] = c;
  m.attr("ERROR_CODES") = codes;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const muster::Error& e) {
      py::object exc = py::reinterpret_borrow<py::object>(g_error)(py::str(e.what()));
      exc.attr("code") = static_cast<int>(e.code());
      exc.attr("name") = muster::error_name(e.code());
      PyErr_SetObject(g_error, exc.ptr());
    }
  });
  m.def(
      "error_name",
      [](int code) { return muster::error_name(static_cast<muster::ErrorCode>(code)); },
      py::arg("code"));
}

void def_rank_info(py::module_& m) {
  py::class_<muster::RankInfo>(m, "RankInfo")
      .def_readonly("job", &muster::RankInfo::job)
      .def_readonly("rank", &muster::RankInfo::rank)
      .def_readonly("local_rank", &muster::RankInfo::local_rank)
      .def_readonly("world_size", &muster::RankInfo::world_size)
      .def_readonly("local_world_size", &muster::RankInfo::local_world_size)
      .def_readonly("node_rank", &muster::RankInfo::node_rank)
      .def_readonly("num_nodes", &muster::RankInfo::num_nodes)
      .def_readonly("device", &muster::RankInfo::device)
      .def_readonly("device_uuid", &muster::RankInfo::device_uuid)
      .def_readonly("generation", &muster::RankInfo::generation)
      .def("__repr__", [](const muster::RankInfo& r) {
        return "RankInfo(job='" + r.job + "', rank=" + std::to_string(r.rank) +
               ", local_rank=" + std::to_string(r.local_rank) +
               ", world_size=" + std::to_string(r.world_size) +
               ", local_world_size=" + std::to_string(r.local_world_size) +
               ", node_rank=" + std::to_string(r.node_rank) +
               ", num_nodes=" + std::to_string(r.num_nodes) +
               ", device=" + std::to_string(r.device) + ", device_uuid='" + r.device_uuid + "'" +
               ", generation=" + std::to_string(r.generation) + ")";
      });
}

using PyClass = py::class_<PyClient>;

// The connection, joining and leaving, and the barrier.
void def_ranks(PyClass& c) {
  c.def(py::init<const std::string&, double, const Timeout&>(), py::arg("endpoint") = "",
        py::arg("request_timeout") = 10.0, py::arg("wait_timeout") = py::none())
      .def_property_readonly("endpoint", &locked_call<&muster::Client::endpoint>)
      .def("ping", &locked_call<&muster::Client::ping>)
      .def("join_from_env", &locked_call<&muster::Client::join_from_env>)
      .def(
          "join",
          [](PyClient& c, const std::string& job, uint32_t local_world_size, bool wants_gpu,
             int local_rank, int64_t owner) {
            muster::JoinOptions o{job, local_world_size, wants_gpu, local_rank, owner};
            return c.locked([&](auto& x) { return x.join(o); });
          },
          // owner: whose job (a uid), root only; -1 = the caller's own.
          py::arg("job"), py::arg("local_world_size") = 1, py::arg("wants_gpu") = true,
          py::arg("local_rank") = -1, py::arg("owner") = -1)
      .def("leave", &locked_call<&muster::Client::leave>)
      .def_property_readonly("joined", &locked_call<&muster::Client::joined>)
      .def_property_readonly("rank_info", &locked_call<&muster::Client::rank_info>)
      .def("is_master", &locked_call<&muster::Client::is_master>)
      .def("is_local_master", &locked_call<&muster::Client::is_local_master>)
      .def(
          "barrier",
          [](PyClient& c, const std::string& name, const Timeout& t) {
            auto ms = to_ms(t);
            c.locked([&](auto& x) { x.barrier(name, ms); });
          },
          py::arg("name") = "default", py::arg("timeout") = py::none());
}

// The store: values are bytes (str is stored as UTF-8).
void def_store(PyClass& c) {
  c.def(
       "set",
       [](PyClient& c, const std::string& key, const py::object& value) {
         auto v = as_bytes(value);
         c.locked([&](auto& x) { x.set(key, v); });
       },
       py::arg("key"), py::arg("value"))
      .def("get", key_read([](auto& x, auto& key, auto ms) { return x.get(key, ms); }),
           py::arg("key"), py::arg("timeout") = py::none())
      .def(
          "try_get",
          [](PyClient& c, const std::string& key) -> py::object {
            auto v = c.locked([&](auto& x) { return x.try_get(key); });
            if (!v) return py::none();
            return to_py(*v);
          },
          py::arg("key"))
      .def(
          "add",
          [](PyClient& c, const std::string& key, int64_t delta) {
            return c.locked([&](auto& x) { return x.add(key, delta); });
          },
          py::arg("key"), py::arg("delta"))
      .def(
          "compare_set",
          [](PyClient& c, const std::string& key, const py::object& expected,
             const py::object& desired) {
            auto e = as_bytes(expected), d = as_bytes(desired);
            return to_py(c.locked([&](auto& x) { return x.compare_set(key, e, d); }));
          },
          py::arg("key"), py::arg("expected"), py::arg("desired"))
      .def(
          "remove",
          [](PyClient& c, const std::string& key) {
            return c.locked([&](auto& x) { return x.remove(key); });
          },
          py::arg("key"))
      .def(
          "wait",
          [](PyClient& c, const std::vector<std::string>& keys, const Timeout& t) {
            auto ms = to_ms(t);
            c.locked([&](auto& x) { x.wait(keys, ms); });
          },
          py::arg("keys"), py::arg("timeout") = py::none())
      .def(
          "num_keys",
          [](PyClient& c, const std::string& prefix) {
            return c.locked([&](auto& x) { return x.num_keys(prefix); });
          },
          py::arg("prefix") = "");
}

// torch's newer Store API (muster/client.hpp).
void def_store_more(PyClass& c) {
  using Keys = std::vector<std::string>;
  auto all_bytes = [](const py::sequence& vs) {
    Keys out;
    for (const auto& v : vs) out.push_back(as_bytes(v));
    return out;
  };
  auto bytes_list = [](const Keys& vs) {
    py::list out;
    for (const auto& v : vs) out.append(to_py(v));
    return out;
  };
  c.def("append",
        [](PyClient& c, const std::string& key, const py::object& value) {
          auto v = as_bytes(value);
          c.locked([&](auto& x) { x.append(key, v); });
        })
      .def("multi_set",
           [all_bytes](PyClient& c, const Keys& keys, const py::sequence& values) {
             auto vs = all_bytes(values);
             c.locked([&](auto& x) { x.multi_set(keys, vs); });
           })
      .def(
          "multi_get",
          [bytes_list](PyClient& c, const Keys& keys, const Timeout& t) {
            auto ms = to_ms(t);
            return bytes_list(c.locked([&](auto& x) { return x.multi_get(keys, ms); }));
          },
          py::arg("keys"), py::arg("timeout") = py::none())
      .def("queue_push",
           [](PyClient& c, const std::string& key, const py::object& value) {
             auto v = as_bytes(value);
             c.locked([&](auto& x) { x.queue_push(key, v); });
           })
      .def("queue_pop", key_read([](auto& x, auto& key, auto ms) { return x.queue_pop(key, ms); }),
           py::arg("key"), py::arg("timeout") = py::none())
      .def("queue_len",
           [](PyClient& c, const std::string& key) {
             return c.locked([&](auto& x) { return x.queue_len(key); });
           })
      .def(
          "list_keys",
          [](PyClient& c, const std::string& prefix) {
            return c.locked([&](auto& x) { return x.list_keys(prefix); });
          },
          py::arg("prefix") = "")
      .def("clone", [](PyClient& c) {
        return std::make_unique<PyClient>(c.locked([](auto& x) { return x.clone(); }));
      });
}

void def_nccl_ids(PyClass& c) {
  c.def(
       "nccl_unique_id",
       [](PyClient& c, const std::string& name, const Timeout& t) {
         auto ms = to_ms(t);
         return to_py(c.locked([&](auto& x) { return muster::nccl_unique_id(x, name, ms); }));
       },
       py::arg("name") = "world", py::arg("timeout") = py::none())
      .def(
          "nccl_unique_ids",
          [](PyClient& c, uint32_t n, const std::string& name, const Timeout& t) {
            auto ms = to_ms(t);
            auto ids = c.locked([&](auto& x) { return muster::nccl_unique_ids(x, n, name, ms); });
            py::list out;
            for (const auto& id : ids) out.append(to_py(id));
            return out;
          },
          py::arg("n"), py::arg("name") = "world", py::arg("timeout") = py::none())
      .def_static("nccl_id_root", &muster::nccl_id_root, py::arg("i"), py::arg("n"),
                  py::arg("world_size"));
}

// Collectives over writable contiguous buffers (bytearray, numpy arrays,
// tensor.numpy()); every rank ends with root's bytes.
void def_collectives(PyClass& c) {
  c.def(
       "broadcast",
       [](PyClient& c, const py::object& buffer, uint32_t root) {
         WritableBuffer b(buffer);
         c.locked([&](auto& x) { muster::broadcast(x, b.data(), b.size(), root); });
       },
       py::arg("buffer"), py::arg("root") = 0)
      // For tensors (no buffer protocol): the caller keeps the memory alive.
      .def(
          "_broadcast_ptr",
          [](PyClient& c, uintptr_t addr, size_t size, uint32_t root) {
            c.locked(
                [&](auto& x) { muster::broadcast(x, reinterpret_cast<void*>(addr), size, root); });
          },
          py::arg("address"), py::arg("size"), py::arg("root") = 0)
      // buffers: a list of (buffer, type, is_parameter), type 'bytes',
      // 'float32' or 'float64'.
      .def(
          "sync_model",
          [](PyClient& c, const py::list& buffers, bool reduce_parameters, bool reduce_buffers) {
            std::vector<WritableBuffer> views;
            std::vector<muster::Buffer> bufs;
            views.reserve(buffers.size());
            for (const auto& item : buffers) {
              auto t = item.cast<py::tuple>();
              if (t.size() != 3)
                throw py::value_error("sync_model buffers are (buffer, type, is_parameter)");
              views.emplace_back(t[0]);
              bufs.push_back({views.back().data(), views.back().size(),
                              parse_type(t[1].cast<std::string>()), t[2].cast<bool>()});
            }
            sync_model(c, bufs, reduce_parameters, reduce_buffers);
          },
          py::arg("buffers"), py::arg("reduce_parameters") = false,
          py::arg("reduce_buffers") = false)
      // For tensors (no buffer protocol): (address, nbytes, type, is_parameter);
      // the caller keeps the memory alive. Not for general use.
      .def(
          "_sync_model_ptrs",
          [](PyClient& c,
             const std::vector<std::tuple<uintptr_t, size_t, std::string, bool>>& items,
             bool reduce_parameters, bool reduce_buffers) {
            std::vector<muster::Buffer> bufs;
            for (const auto& [addr, n, type, is_param] : items)
              bufs.push_back({reinterpret_cast<void*>(addr), n, parse_type(type), is_param});
            sync_model(c, bufs, reduce_parameters, reduce_buffers);
          },
          py::arg("buffers"), py::arg("reduce_parameters") = false,
          py::arg("reduce_buffers") = false);
}

// This rank's DistributedSampler indices: a list of int, or an int64 numpy
// array with as_numpy.
void def_sampler(PyClass& c) {
  c.def(
      "sampler_shard",
      [](PyClient& c, uint64_t dataset_size, uint64_t epoch, uint64_t seed, bool shuffle,
         bool drop_last, bool as_numpy, uint64_t consumed) -> py::object {
        muster::Client::ShardOptions o{dataset_size, epoch, seed, shuffle, drop_last, consumed};
        auto v = std::make_unique<std::vector<int64_t>>(
            c.locked([&](auto& x) { return x.sampler_shard(o); }));
        if (!as_numpy) return py::cast(*v);
        auto* raw = v.get();
        py::capsule owner(v.release(),
                          [](void* p) { delete static_cast<std::vector<int64_t>*>(p); });
        return py::array_t<int64_t>({static_cast<py::ssize_t>(raw->size())}, raw->data(), owner);
      },
      py::arg("dataset_size"), py::arg("epoch") = 0, py::arg("seed") = 0, py::arg("shuffle") = true,
      py::arg("drop_last") = false, py::arg("as_numpy") = false, py::arg("consumed") = 0);
  c.def("sampler_commit", [](PyClient& c, uint64_t n, uint64_t epoch, uint64_t seed, bool shuffle,
                             bool drop_last, uint64_t consumed) {
    c.locked([&](auto& x) { x.sampler_commit({n, epoch, seed, shuffle, drop_last, consumed}); });
  });
  // (epoch, consumed, drop_last) of this run's last commit, or None.
  c.def("sampler_resume", [](PyClient& c, uint64_t n, uint64_t seed, bool shuffle) -> py::object {
    auto p = c.locked([&](auto& x) { return x.sampler_resume(n, seed, shuffle); });
    return p ? py::object(py::make_tuple(p->epoch, p->consumed, p->drop_last)) : py::none();
  });
}

}  // namespace

PYBIND11_MODULE(_muster, m) {
  m.doc() = "libmuster bindings (use the `muster` package, not this module)";
  m.attr("__version__") = MUSTER_VERSION;
  def_errors(m);
  def_rank_info(m);
  PyClass c(m, "Client",
            "A connection to the node's musterd (one per process is enough; "
            "calls from several threads are serialised).");
  def_ranks(c);
  def_store(c);
  def_store_more(c);
  def_nccl_ids(c);
  def_collectives(c);
  def_sampler(c);
}
