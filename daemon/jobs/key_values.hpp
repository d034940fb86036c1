// A job's key/value store. It remembers which keys changed since the
// persister last asked, so that a save writes those keys and not the whole
// store (persist/change_log.hpp): a 1-byte set beside a 500 MB store costs
// a few bytes on disk.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace muster::daemon {

class KeyValues {
 public:
  using Map = std::unordered_map<std::string, std::string>;

  const std::string* find(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  bool contains(const std::string& key) const { return map_.count(key) != 0; }
  size_t size() const { return map_.size(); }
  // Bytes of all keys and values (what the store quota counts).
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return map_.empty(); }
  Map::const_iterator begin() const { return map_.begin(); }
  Map::const_iterator end() const { return map_.end(); }

  void set(const std::string& key, std::string value) {
    auto [it, fresh] = map_.try_emplace(key);
    bytes_ += value.size() - it->second.size() + (fresh ? key.size() : 0);
    it->second = std::move(value);
    changed_.insert(key);
  }
  bool erase(const std::string& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    bytes_ -= key.size() + it->second.size();
    map_.erase(it);
    changed_.insert(key);
    return true;
  }

  // The keys set or erased since the last call, each once. (At most every
  // key the store ever had: a store whose changes nobody takes, such as a
  // coordinator's global one, costs no more than its keys.) Const: which
  // keys the disk has yet to see is the persister's bookkeeping, not the
  // store's contents, and the persister sees the state as const.
  std::vector<std::string> take_changed() const {
    std::vector<std::string> keys(changed_.begin(), changed_.end());
    changed_.clear();
    return keys;
  }
  void forget_changes() const { changed_.clear(); }

 private:
  Map map_;
  uint64_t bytes_ = 0;
  mutable std::unordered_set<std::string> changed_;
};

}  // namespace muster::daemon
