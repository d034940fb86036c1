"""A rank that uses libmuster through ctypes only (no compiled module), run by
`muster run -n 2 --use-env tests/ctypes_rank.py`: the C ABI is usable from
Python as it is. MUSTER_LIB names the shared library."""
import ctypes
import os
import sys


class RankInfo(ctypes.Structure):
    _fields_ = [("job", ctypes.c_char * 129), ("rank", ctypes.c_uint32),
                ("local_rank", ctypes.c_uint32), ("world_size", ctypes.c_uint32),
                ("local_world_size", ctypes.c_uint32), ("node_rank", ctypes.c_uint32),
                ("num_nodes", ctypes.c_uint32), ("device", ctypes.c_int32),
                ("generation", ctypes.c_uint64)]


lib = ctypes.CDLL(os.environ["MUSTER_LIB"])
lib.muster_client_new.restype = ctypes.c_void_p
lib.muster_error_message.restype = ctypes.c_char_p
lib.muster_error_message.argtypes = [ctypes.c_void_p]
for name in ("muster_join_env", "muster_store_set", "muster_store_get", "muster_barrier",
             "muster_is_master"):
    getattr(lib, name).argtypes = None
c = ctypes.c_void_p(lib.muster_client_new(None))
me = RankInfo()
if lib.muster_join_env(c, ctypes.byref(me)) != 0:
    sys.exit(f"join failed: {lib.muster_error_message(c).decode()}")
assert me.world_size == 2 and me.rank == int(os.environ["RANK"]), (me.world_size, me.rank)
assert lib.muster_is_master(c) == (1 if me.rank == 0 else 0)
val = f"py-{me.rank}".encode()
assert lib.muster_store_set(c, f"py/{me.rank}".encode(), val, ctypes.c_size_t(len(val))) == 0
assert lib.muster_barrier(c, b"py", ctypes.c_int64(10000)) == 0
out = ctypes.c_void_p()
n = ctypes.c_size_t()
assert lib.muster_store_get(c, f"py/{1 - me.rank}".encode(), ctypes.c_int64(5000),
                            ctypes.byref(out), ctypes.byref(n)) == 0
assert ctypes.string_at(out, n.value) == f"py-{1 - me.rank}".encode()
lib.muster_free(out)
code = lib.muster_barrier(c, b"py-done", ctypes.c_int64(10000))
assert code == 0, lib.muster_error_message(c)
if me.rank == 0:
    print("ctypes: 2 ranks passed")
