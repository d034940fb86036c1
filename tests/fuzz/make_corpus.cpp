// Writes the seed corpus of fuzz_request (tests/fuzz/corpus/): valid frames
// of every request type, alone and in sequences that build state (a job
// joined by pid 1, which always exists, then store, barrier and shard
// requests on it), frames separated by C1 C1. Run by `scripts/fuzz.sh
// --make-corpus`; the output is committed.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "protocol/envelope.hpp"

using namespace muster::proto;

namespace {

uint64_t g_id = 1;

template <class M>
std::string f(const M& m) {
  return encode(g_id++, m);
}

void write(const std::string& dir, const std::string& name, const std::vector<std::string>& fr) {
  std::string all;
  for (size_t i = 0; i < fr.size(); ++i) {
    if (i) all += "\xc1\xc1";
    all += fr[i];
  }
  std::ofstream(dir + "/" + name, std::ios::binary) << all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR\n");
    return 2;
  }
  std::string d = argv[1];
  auto join0 = f(Join{"j", 2, true, 1, 0});
  auto join1 = f(Join{"j", 2, true, 1, 1});
  write(d, "ping", {f(Ping{})});
  write(d, "status", {f(Status{})});
  write(d, "join", {f(Join{"j", 1, true, 1, -1})});
  write(d, "join-cpu", {f(Join{"cpu", 4, false, 1, 2})});
  write(d, "leave", {join0, f(Leave{"j", 1, 0})});
  write(d, "reserve-attach",
        {f(Reserve{"r", 2, true, {0, 1}, 1}), f(Attach{"r", {1, 1}}), f(Status{})});
  write(d, "reserve-any", {f(Reserve{"r", 3, true, {}, 1})});
  write(
      d, "store",
      {join0, f(StoreSet{"j", "k", "v"}), f(StoreGet{"j", "k", 0}), f(StoreAdd{"j", "n", 5}),
       f(StoreCompareSet{"j", "k", "v", "w"}), f(StoreDelete{"j", "k"}), f(StoreGet{"j", "k", 0})});
  write(d, "store-wait",
        {join0, f(StoreWait{"j", {"a", "b"}, 100}), f(StoreSet{"j", "a", "1"}),
         f(StoreGet{"j", "b", 1000}), f(StoreSet{"j", "b", "2"})});
  write(d, "store-timeout", {join0, f(StoreGet{"j", "never", 1})});
  write(d, "barrier", {join0, join1, f(Barrier{"j", 0, "b", 1000}), f(Barrier{"j", 1, "b", 1000})});
  write(d, "barrier-exit", {join0, join1, f(Barrier{"j", 0, "b", 60000})});
  write(d, "shard",
        {join0, join1, f(Shard{"j", 1, 1000, 3, 42, true, false}),
         f(Shard{"j", 0, 17, 0, 0, false, true})});
  muster::codec::Buffer empty_map;
  muster::codec::Packer(empty_map).pack_map(0);
  write(d, "bad-version", {encode_raw(g_id++, 1, empty_map, 7)});
  write(d, "reply-type", {f(Ok{})});
  return 0;
}
