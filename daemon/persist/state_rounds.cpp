// The coordinator's rounds in the state file (persist/round_codec.hpp): a
// header record when a round changed, a record per key of its global store
// set or erased, as for the node's own jobs (state_file.cpp).
#include "cluster/multi_node.hpp"
#include "persist/round_codec.hpp"
#include "persist/state_codec.hpp"
#include "persist/state_file.hpp"

namespace muster::daemon {

namespace sc = state_codec;

// What the next save may write of a round: its record as now, or, for an
// open round whose record holds no nodes yet, what it becomes when it
// closes with the nodes it has (each join adds kNodeBytes to the claim).
size_t StateFile::round_room(const CoordJob& cj, size_t record) {
  return cj.closed ? record : record + (cj.nodes.size() + cj.waiting.size()) * kNodeBytes;
}

void StateFile::append_rounds(const State& st) {
  size_t room = 0;
  std::map<std::string, Written> now;
  for (const auto& [id, cj] : st.cluster().rounds()) {
    auto w = written_rounds_.find(id);
    bool same = w != written_rounds_.end() && w->second.incarnation == cj.incarnation;
    // A closed round's header holds all its nodes: encoded at every save,
    // it cost O(nodes) per request (bench_swarm). Its fingerprint says when
    // it may have changed.
    std::string fp = round_codec::fingerprint(cj);
    std::string header;
    if (same && !fp.empty() && fp == w->second.fingerprint) {
      header = std::move(w->second.header);  // unchanged: nothing to write
    } else {
      header = round_codec::round_record(id, cj);
      if (w != written_rounds_.end() && !same) log_.append(sc::kRoundGone, sc::job_gone(id));
      if (!same || w->second.header != header) log_.append(sc::kRound, header);
    }
    const KeyValues& kv = cj.store.kv;
    if (same) {
      for (const auto& k : kv.take_changed()) {
        if (const std::string* v = kv.find(k))
          log_.append(sc::kRoundKey, sc::key_set(id, k, *v));
        else
          log_.append(sc::kRoundKeyGone, sc::key_gone(id, k));
      }
    } else {
      kv.forget_changes();
      for (const auto& [k, v] : kv) log_.append(sc::kRoundKey, sc::key_set(id, k, v));
    }
    room += round_room(cj, header.size());
    now[id] = {cj.incarnation, std::move(header), std::move(fp)};
  }
  for (const auto& [id, w] : written_rounds_)
    if (!now.count(id)) log_.append(sc::kRoundGone, sc::job_gone(id));
  written_rounds_ = std::move(now);
  rounds_room_ = room;
}

void StateFile::note_rounds(const State& st) {
  written_rounds_.clear();
  rounds_room_ = 0;
  for (const auto& [id, cj] : st.cluster().rounds()) {
    cj.store.kv.forget_changes();
    std::string header = round_codec::round_record(id, cj);
    rounds_room_ += round_room(cj, header.size());
    written_rounds_[id] = {cj.incarnation, std::move(header), round_codec::fingerprint(cj)};
  }
}

void StateFile::restore_rounds(State& st, std::map<std::string, CoordJob>& rounds) {
  for (auto& [id, cj] : rounds) {
    cj.store.kv.forget_changes();
    st.cluster().restore_round(id, std::move(cj));
  }
}

}  // namespace muster::daemon
