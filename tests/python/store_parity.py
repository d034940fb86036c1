"""PyTorch's own Store tests, run on muster.MusterStore under
`muster run -n 1 --use-env /usr/bin/python3 THIS`.

Adapted from StoreTestBase and the generic store tests of
test/distributed/test_store.py in pytorch/pytorch, commit
f34fa1515024423a239ce26f33a8b65ea9252502 (read through the code search;
TCPStoreTest.test_numkeys_delkeys from commit
00d48902182b42a7cd48bef911c1addcc9fe73c5, the same in both). The bodies are
torch's; what changed is marked "muster:":
- _create_store makes a MusterStore (each test its own prefix of the job's
  store, as each of torch's tests gets a new TCPStore) or a torch
  PrefixStore over one;
- num_keys_total is 5, like HashStore's: a MusterStore has no init key
  (TCPStore has one, hence torch's 6);
- the newer API's tests (append, multi_get/multi_set, queues, clone) run
  when the torch in use declares that API on dist.Store, as torch's own
  tests do (has_extended_api, NotImplementedError); torch 1.13 does not,
  and then they say so and pass;
- torch 1.13's Python Store has no check() (a PrefixStore has no such
  attribute); the prefix tests then skip that call and say so. Every
  method it has, num_keys and delete_key included, must reach the
  MusterStore (PrefixStoreForwardsTest).
"""
import sys
import unittest
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

try:
    import torch  # noqa: F401
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

import muster

DistStoreError = getattr(dist, "DistStoreError", RuntimeError)
# muster: torch 1.13 has none of these on dist.Store.
TORCH_EXTENDED = hasattr(dist.Store, "has_extended_api")
TORCH_QUEUES = hasattr(dist.Store, "queue_push")
TORCH_CLONE = hasattr(dist.Store, "clone")


def forwards(store, call):
    """False when the torch in use has no such method on `store` (1.13's
    PrefixStore has no check); anything else it raises is a failure."""
    try:
        call(store)
        return True
    except AttributeError as e:
        print(f"note: {type(store).__name__} of this torch has no such method: {e}")
        return False


class StoreTestBase:
    def _create_store(self, i=None):
        raise RuntimeError("not implemented")

    def _test_set_get_check(self, fs):
        fs.add("key", 1)
        fs.add("key", 2)
        fs.add("key", 3)
        fs.set("key0", "value0")
        fs.add("key3", 1)
        fs.set("key1", "value1")
        fs.add("key3", 2)
        fs.set("key2", "value2")
        fs.add("key3", 3)
        fs.add("key3", 4)
        fs.add("key3", 5)
        fs.add("key3", 6)
        counts = forwards(fs, lambda s: s.num_keys())  # muster: see the docstring
        if counts:
            self.assertEqual(fs.num_keys(), self.num_keys_total)
        self.assertEqual(b"6", fs.get("key"))
        self.assertEqual(b"value0", fs.get("key0"))
        self.assertEqual(b"value1", fs.get("key1"))
        self.assertEqual(b"value2", fs.get("key2"))
        self.assertEqual(b"21", fs.get("key3"))
        if forwards(fs, lambda s: s.check(["key3"])):
            self.assertTrue(fs.check(["key3"]))
            self.assertFalse(fs.check(["Randomkey3"]))

        fs.set("-key3", "7")
        self.assertEqual(b"7", fs.get("-key3"))
        if forwards(fs, lambda s: s.delete_key("-key3")) and counts:
            self.assertEqual(fs.num_keys(), self.num_keys_total)

    def test_set_get_check(self):
        self._test_set_get_check(self._create_store())

    def _test_compare_set(self, store):
        missing_key_result = store.compare_set("cs_key0", "wrong_old_value", "new_value0")
        self.assertEqual(b"wrong_old_value", missing_key_result)

        store.set("cs_key0", "value0")
        self.assertEqual(b"value0", store.get("cs_key0"))
        old_value_result = store.compare_set("cs_key0", "wrong_old_value", "new_value0")
        self.assertEqual(b"value0", old_value_result)
        self.assertEqual(b"value0", store.get("cs_key0"))
        new_value_result = store.compare_set("cs_key0", "value0", "new_value0")
        self.assertEqual(b"new_value0", new_value_result)
        self.assertEqual(b"new_value0", store.get("cs_key0"))
        empty_old_value_result = store.compare_set("cs_key1", "", "new_value1")
        self.assertEqual(b"new_value1", empty_old_value_result)
        self.assertEqual(b"new_value1", store.get("cs_key1"))

    def test_compare_set(self):
        self._test_compare_set(self._create_store())

    def _test_simple_wait(self, fs):
        with self.assertRaisesRegex(RuntimeError, "[t -i]imeout"):
            fs.wait(["bad_key"], timedelta(seconds=0.25))
        fs.add("good_key", 1)
        fs.wait(["good_key"])

    def test_simple_wait(self):
        self._test_simple_wait(self._create_store())

    # muster: TCPStoreTest.test_numkeys_delkeys, with no init key (0, not 1).
    def test_numkeys_delkeys(self):
        fs = self._create_store()
        if not forwards(fs, lambda s: s.num_keys()):
            return
        self.assertEqual(fs.num_keys(), 0)
        fs.add("key", 1)
        fs.add("key", 2)
        fs.add("key", 3)
        fs.set("key0", "value0")
        fs.add("key3", 1)
        fs.set("key1", "value1")
        self.assertEqual(fs.num_keys(), 4)
        fs.delete_key("key")
        self.assertEqual(fs.num_keys(), 3)
        fs.set_timeout(timedelta(seconds=2))
        with self.assertRaises(RuntimeError):
            fs.get("key")
        fs.delete_key("key0")
        fs.delete_key("key3")
        self.assertEqual(fs.num_keys(), 1)
        fs.set("key4", "value2")
        self.assertEqual(fs.num_keys(), 2)
        self.assertEqual(b"value1", fs.get("key1"))
        self.assertEqual(b"value2", fs.get("key4"))

    # muster: the get timeout raises what torch raises (DistStoreError where
    # torch has it, a RuntimeError saying "Timeout" on 1.13), after set_timeout.
    def test_get_timeout(self):
        fs = self._create_store()
        fs.set_timeout(timedelta(seconds=0.25))
        with self.assertRaisesRegex(DistStoreError, "Timeout"):
            fs.get("never_set")

    def _extended(self, store):
        # muster: torch's own check is store.has_extended_api().
        return TORCH_EXTENDED and store.has_extended_api()

    def _test_append(self, store):
        if not self._extended(store):
            return
        store.set("foo", "po")
        store.append("foo", "tato")
        store.append("bar", "po")
        store.append("bar", "tato")
        self.assertEqual(b"potato", store.get("foo"))
        self.assertEqual(b"potato", store.get("bar"))

    def test_append(self):
        self._test_append(self._create_store())

    def _create_store_or_skip_if_no_queues(self):
        store = self._create_store()
        try:
            if not TORCH_QUEUES:  # muster: torch 1.13 has no queue API
                raise NotImplementedError
            store.queue_push("test_queue_support", "1")
        except NotImplementedError:
            self.skipTest("Store does not support queues")
        return store

    def test_queues(self):
        store = self._create_store_or_skip_if_no_queues()
        self.assertFalse(store.check(["foo"]))
        self.assertEqual(store.queue_len("foo"), 0)
        store.queue_push("foo", "1")
        store.queue_push("foo", "2")
        self.assertTrue(store.check(["foo"]))
        self.assertEqual(store.queue_len("foo"), 2)
        store.wait(["foo"])
        self.assertEqual(store.queue_pop("foo"), b"1")
        self.assertEqual(store.queue_pop("foo"), b"2")
        self.assertFalse(store.check(["foo"]))
        self.assertEqual(store.queue_len("foo"), 0)

    def test_queues_nonblocking(self):
        store = self._create_store_or_skip_if_no_queues()
        with self.assertRaisesRegex(dist.QueueEmptyError, "empty"):
            store.queue_pop("foo", block=False)
        store.queue_push("foo", "a")
        self.assertEqual(store.queue_pop("foo", block=False), b"a")

    def test_queues_bidirectional(self):
        store = self._create_store_or_skip_if_no_queues()

        def worker_a():
            local_store = store.clone()
            local_store.queue_push("a", "a1")
            self.assertEqual(local_store.queue_pop("b"), b"b1")

        def worker_b():
            local_store = store.clone()
            self.assertEqual(local_store.queue_pop("a"), b"a1")
            local_store.queue_push("b", "b1")

        with ThreadPoolExecutor(max_workers=2) as pool:
            for fut in [pool.submit(worker_a), pool.submit(worker_b)]:
                fut.result()

    def test_queues_timeout(self):
        store = self._create_store_or_skip_if_no_queues()
        store.set_timeout(timedelta(seconds=0.01))
        with self.assertRaisesRegex(DistStoreError, "timeout"):
            store.queue_pop("non_existant")

    def _test_multi_set(self, store):
        if not self._extended(store):
            return
        store.multi_set(["foo", "bar"], ["po", "tato"])
        self.assertEqual(b"po", store.get("foo"))
        self.assertEqual(b"tato", store.get("bar"))

    def test_multi_set(self):
        self._test_multi_set(self._create_store())

    def _test_multi_get(self, store):
        if not self._extended(store):
            return
        store.set("foo", "po")
        store.set("bar", "tato")
        v0, v1 = store.multi_get(["foo", "bar"])
        self.assertEqual(b"po", v0)
        self.assertEqual(b"tato", v1)

    def test_multi_get(self):
        self._test_multi_get(self._create_store())

    def test_clone(self):
        if not TORCH_CLONE:  # muster: torch 1.13's Store has no clone
            self.skipTest("this torch's Store has no clone()")
        a = self._create_store()
        b = a.clone()
        self.assertIsInstance(b, dist.Store)
        a.set("foo", "bar")
        self.assertEqual(b.get("foo"), b"bar")

    @property
    def num_keys_total(self):
        return 5


class MusterStoreTest(unittest.TestCase, StoreTestBase):
    def _create_store(self, i=None):
        store = muster.MusterStore(prefix=f"parity/{self.id()}/")
        store.set_timeout(timedelta(seconds=300))
        return store


class PrefixMusterStoreTest(unittest.TestCase, StoreTestBase):
    def setUp(self):
        super().setUp()
        # muster: each test its own MusterStore (torch's tests each get a new
        # TCPStore), kept referenced: the PrefixStore holds only torch's side.
        self.musterstore = muster.MusterStore(prefix=f"parity/{self.id()}/")
        self.prefix = "test_prefix"
        self.musterstore.set_timeout(timedelta(seconds=300))

    def _create_store(self, i=None):
        return dist.PrefixStore(self.prefix, self.musterstore)


class PrefixStoreForwardsTest(unittest.TestCase):
    """muster: every method of the torch in use's PrefixStore, called on a
    PrefixStore over a MusterStore, reaches the MusterStore (torch 1.13
    looks getNumKeys and deleteKey up under their C++ names)."""

    def setUp(self):
        self.inner = muster.MusterStore(prefix=f"parity/{self.id()}/")
        self.inner.set_timeout(timedelta(seconds=300))
        self.store = dist.PrefixStore("pre", self.inner)

    def test_every_method_reaches_the_musterstore(self):
        p, inner = self.store, self.inner
        calls = {
            "set": lambda: p.set("k", "v"),
            "get": lambda: self.assertEqual(p.get("k"), b"v"),
            "add": lambda: self.assertEqual(p.add("n", 5), 5),
            "compare_set": lambda: self.assertEqual(p.compare_set("k", "v", "w"), b"w"),
            "num_keys": lambda: self.assertEqual(p.num_keys(), 2),
            "delete_key": lambda: self.assertTrue(p.delete_key("n")),
            "wait": lambda: p.wait(["k"]),
            "set_timeout": lambda: p.set_timeout(timedelta(seconds=0.25)),
            "timeout": lambda: self.assertEqual(p.timeout, timedelta(seconds=0.25)),
            "check": lambda: self.assertTrue(p.check(["k"]) and not p.check(["n"])),
            "underlying_store": lambda: self.assertIs(p.underlying_store, inner),
            # torch 2.x's newer API, where the torch in use has it.
            "has_extended_api": lambda: p.has_extended_api(),
            "append": lambda: p.append("k", "x"),
            "multi_get": lambda: p.multi_get(["k"]),
            "multi_set": lambda: p.multi_set(["m"], ["1"]),
            "queue_push": lambda: p.queue_push("q", "1"),
            "queue_pop": lambda: self.assertEqual(p.queue_pop("q"), b"1"),
            "queue_len": lambda: self.assertEqual(p.queue_len("q"), 0),
            "list_keys": lambda: p.list_keys(),
            "clone": lambda: p.clone(),
        }
        methods = [m for m in dir(dist.PrefixStore) if not m.startswith("_")]
        missing = [m for m in methods if m not in calls]
        self.assertEqual(missing, [], "PrefixStore methods this test does not call")
        for name, call in calls.items():
            if name in methods:
                with self.subTest(method=name):
                    call()
        # What went through the PrefixStore is in the MusterStore, prefixed.
        self.assertEqual(inner.get("pre/k"), b"w")
        self.assertFalse(inner.delete_key("pre/n"))
        self.assertEqual(inner.num_keys(), p.num_keys())
        # A wait's timeout reaches the MusterStore too, as torch's error.
        with self.assertRaisesRegex(DistStoreError, "Timeout"):
            p.wait(["never_set"], timedelta(seconds=0.25))
        with self.assertRaisesRegex(DistStoreError, "Timeout"):
            p.get("never_set")  # after set_timeout(0.25 s)


class NewerApiOnThisTorchTest(unittest.TestCase):
    """muster: MusterStore's newer-API methods called as functions, so that
    they run on a torch that does not declare them (torch's semantics, as in
    test_append, test_multi_get/set, test_queues*, test_clone above)."""

    def setUp(self):
        from muster.distributed import _NEWER_API
        self.api = _NEWER_API
        self.store = muster.MusterStore(prefix=f"parity/{self.id()}/")
        self.store.set_timeout(timedelta(seconds=300))

    def call(self, name, *args, store=None, **kwargs):
        return self.api[name](store or self.store, *args, **kwargs)

    def test_torch_declares_what_musterstore_shows(self):
        for name in self.api:
            self.assertEqual(hasattr(muster.MusterStore, name), hasattr(dist.Store, name), name)

    def test_append_multi_list(self):
        s = self.store
        s.set("foo", "po")
        self.call("append", "foo", "tato")
        self.call("append", "bar", "potato")
        self.assertEqual(s.get("foo"), b"potato")
        self.call("multi_set", ["m1", "m2"], ["po", b"tato"])
        self.assertEqual(self.call("multi_get", ["m2", "m1", "bar"]), [b"tato", b"po", b"potato"])
        self.assertEqual(self.call("list_keys"), ["bar", "foo", "m1", "m2"])
        self.assertTrue(self.call("has_extended_api"))

    def test_queues_and_clone(self):
        s = self.store
        self.assertEqual(self.call("queue_len", "q"), 0)
        self.call("queue_push", "q", "1")
        self.call("queue_push", "q", "2")
        self.assertTrue(s.check(["q"]))
        self.assertEqual(self.call("queue_len", "q"), 2)
        self.assertEqual(self.call("queue_pop", "q"), b"1")
        self.assertEqual(self.call("queue_pop", "q", block=False), b"2")
        self.assertFalse(s.check(["q"]))
        empty = getattr(dist, "QueueEmptyError", muster.Error)
        with self.assertRaisesRegex(empty, "empty"):
            self.call("queue_pop", "q", block=False)
        s.set_timeout(timedelta(seconds=0.05))
        with self.assertRaisesRegex(DistStoreError, "timeout"):
            self.call("queue_pop", "q")
        s.set_timeout(timedelta(seconds=300))
        # Two clones, each waiting for the other's push (test_queues_bidirectional).
        a, b = self.call("clone"), self.call("clone")
        self.assertIsInstance(a, dist.Store)

        def worker_a():
            self.call("queue_push", "to_b", "a1", store=a)
            return self.call("queue_pop", "to_a", store=a)

        def worker_b():
            got = self.call("queue_pop", "to_b", store=b)
            self.call("queue_push", "to_a", "b1", store=b)
            return got

        with ThreadPoolExecutor(max_workers=2) as pool:
            fa, fb = pool.submit(worker_a), pool.submit(worker_b)
            self.assertEqual(fa.result(), b"b1")
            self.assertEqual(fb.result(), b"a1")


if __name__ == "__main__":
    unittest.main(verbosity=2)
