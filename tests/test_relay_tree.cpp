// The relay tree of a forming world (daemon/cluster/coordinator.cpp,
// relay_tree): nodes that listen for children hold every position that
// has children, nodes that do not listen are leaves (the swarm benchmark's
// nodes, or a node daemon started without --peer-bind), and when every node
// listens the tree is the heap over node ranks it always was. Through a
// Coordinator too: each node's World names its parent and its subtree.
#include <catch2/catch.hpp>

#include <map>

#include "cluster/coordinator.hpp"
#include "core/store.hpp"

using namespace muster;
using namespace muster::daemon;

namespace {

std::vector<RoundNode> nodes_of(const std::string& listening, uint32_t nproc = 2) {
  std::vector<RoundNode> v;
  for (size_t r = 0; r < listening.size(); ++r) {
    RoundNode n;
    n.node_id = "n" + std::to_string(r);
    n.nproc = nproc;
    n.node_rank = static_cast<uint32_t>(r);
    if (listening[r] == 'L') n.peer_endpoint = "127.0.0.1:" + std::to_string(30000 + r);
    v.push_back(n);
  }
  return v;
}

RelayTree tree_of(std::vector<RoundNode>& v, uint32_t width) {
  std::vector<RoundNode*> order;
  for (auto& n : v) order.push_back(&n);
  return relay_tree(order, width);
}

}  // namespace

TEST_CASE("every node listens: the heap over node ranks") {
  auto v = nodes_of("LLLLLLL");
  RelayTree t = tree_of(v, 2);
  REQUIRE(t.parent.size() == 7);
  // The coordinator's children are 0 and 1; node r's are (r+1)2 and (r+1)2+1.
  CHECK(t.parent == std::vector<int64_t>{-1, -1, 0, 0, 1, 1, 2});
  CHECK(t.subtree == std::vector<uint32_t>{8, 6, 4, 2, 2, 2, 2});
}

TEST_CASE("nodes that do not listen are leaves; listening ones relay") {
  // Node ranks 0, 3 listen: they take positions 0 and 1, the others follow.
  auto v = nodes_of("L..L...", 1);
  RelayTree t = tree_of(v, 3);
  // 7 nodes, width 3: positions 0 and 1 have children ((7-1)/3 = 2).
  REQUIRE(t.parent.size() == 7);
  CHECK(t.parent[0] == -1);
  CHECK(t.parent[3] == -1);
  CHECK(t.parent[1] == -1);  // position 2: a child of the coordinator
  // Positions 3..5 (node ranks 2, 4, 5) under position 0 (node rank 0),
  // position 6 (node rank 6) under position 1 (node rank 3).
  CHECK(t.parent[2] == 0);
  CHECK(t.parent[4] == 0);
  CHECK(t.parent[5] == 0);
  CHECK(t.parent[6] == 3);
  for (size_t r = 0; r < 7; ++r)
    if (v[r].peer_endpoint.empty()) CHECK(t.subtree[r] == 1);
  CHECK(t.subtree[0] == 4);
  CHECK(t.subtree[3] == 2);
}

TEST_CASE("too few listening nodes, or too few nodes: a flat star") {
  auto few = nodes_of("L......", 1);  // width 3 needs 2 relays for 7 nodes
  CHECK(tree_of(few, 3).parent.empty());
  auto small = nodes_of("LLL");
  CHECK(tree_of(small, 3).parent.empty());
  CHECK(tree_of(small, 0).parent.empty());
}

TEST_CASE("a coordinator sends each node its parent's endpoint and its subtree's ranks") {
  Store store;
  Coordinator c(store);
  c.configure(std::chrono::seconds(10), 2);
  std::vector<Outgoing> out;
  const std::string listening = "L.L..";
  for (size_t r = 0; r < listening.size(); ++r) {
    proto::NodeJoin m;
    m.job = "job1";
    m.node_id = "n" + std::to_string(r);
    m.nproc = 4;
    m.node_rank = static_cast<int64_t>(r);
    m.min_nodes = m.max_nodes = 5;
    m.owner_uid = 1000;
    if (listening[r] == 'L') m.peer_endpoint = "127.0.0.1:" + std::to_string(30000 + r);
    ReplyTo to;
    to.routing_id = "L" + m.node_id;
    to.request_id = 1;
    to.from_peer = true;
    c.node_join(to, m, {}, out);
  }
  std::map<uint32_t, proto::World> worlds;
  for (const auto& o : out) {
    auto env = proto::decode_envelope(o.frame.data(), o.frame.size());
    REQUIRE(env.type == static_cast<uint16_t>(proto::MsgType::kWorld));
    auto w = proto::World::unpack(env.payload);
    worlds[w.node_rank] = w;
  }
  REQUIRE(worlds.size() == 5);
  // Positions: 0 -> n0, 1 -> n2 (the listening ones), then n1, n3, n4:
  // n1 and n3 under n0, n4 under n2.
  CHECK(worlds[0].parent.empty());
  CHECK(worlds[2].parent.empty());
  CHECK(worlds[1].parent == "127.0.0.1:30000");
  CHECK(worlds[3].parent == "127.0.0.1:30000");
  CHECK(worlds[4].parent == "127.0.0.1:30002");
  CHECK(worlds[0].subtree_ranks == 12);
  CHECK(worlds[2].subtree_ranks == 8);
  CHECK(worlds[4].subtree_ranks == 4);
}

// node_join finds a node of the open round through an index it keeps exact
// (cluster.hpp, open_member): every answer must be what a scan would say,
// whatever changed the round's nodes behind the index.
TEST_CASE("an open round's node index answers as a scan would") {
  CoordJob cj;
  auto scan_agrees = [&](const std::string& id) {
    RoundNode* by_scan = find_node(cj.nodes, id);
    RoundNode* by_index = open_member(cj, id);
    return by_scan == by_index;
  };
  for (auto& n : nodes_of("LLLLLLLL")) {
    CHECK(open_member(cj, n.node_id) == nullptr);
    open_add(cj, n);
  }
  for (int i = 0; i < 8; ++i) CHECK(scan_agrees("n" + std::to_string(i)));
  CHECK(scan_agrees("n8"));
  // Nodes dropped for silence (heartbeat.cpp also clears the index; not
  // needed: the size tells), then one joins again as node_join adds it.
  std::erase_if(cj.nodes,
                [](const RoundNode& n) { return n.node_id == "n2" || n.node_id == "n5"; });
  for (int i = 0; i < 9; ++i) CHECK(scan_agrees("n" + std::to_string(i)));
  RoundNode back = nodes_of("L")[0];
  back.node_id = "n2";
  REQUIRE(open_member(cj, "n2") == nullptr);
  open_add(cj, back);
  std::erase_if(cj.nodes, [](const RoundNode& n) { return n.node_id == "n7"; });
  for (int i = 0; i < 9; ++i) CHECK(scan_agrees("n" + std::to_string(i)));
  // A new round: nothing of the old one is found.
  cj.nodes.clear();
  CHECK(open_member(cj, "n0") == nullptr);
  open_add(cj, back);
  CHECK(open_member(cj, "n2") == &cj.nodes[0]);
  CHECK(open_member(cj, "n0") == nullptr);
}
