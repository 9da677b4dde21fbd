// consensus::Node's roles (batching, forwarding, read index, leader changes,
// restarts) in a 3-member cluster inside this process: each member is a
// real Node with its consensus thread, its libuv loop and its log in a
// temporary directory, applying through member::ApplierFsm into a real
// apply::Applier on RocksDB. Only the sockets are replaced: libraft's
// transport by tests/unit/memory_network.h (the test cuts and heals links)
// and Peer calls by in-process calls to the target Node (InProcessForwarder
// below), so partitions and kills are decided by the test.
//
// With snapshots every 16 entries, a member that was down installs the
// leader's snapshot, streamed from its live state as Peer.FetchSnapshot does.
//
// It also plays a peer with a bad build: malformed commands forwarded to the
// leader are refused before they reach the log, and malformed entries that a
// bad leader did get committed apply as skipped on every member alike,
// stopping none (the process would exit if one did: apply failures are fatal).
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "apply/applier.h"
#include "apply/state_machine.h"
#include "apply/entry.h"
#include "common/state_pairs.h"
#include "apply/kv.h"
#include "etcdq/command.pb.h"
#include "memory_network.h"
#include "mvcc/store.h"
#include "state_dump.h"
#include "member/context.h"
#include "member/forwarded.h"
#include "member/fsm.h"
#include "consensus/node.h"
#include "storage/engine.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr unsigned kMembers = 3;
constexpr unsigned kHeartbeatMs = 50;
constexpr unsigned kElectionMs = 500;
constexpr auto kWait = std::chrono::seconds(20);  // far above any election here

// One member's state machine: apply::StateMachine on a real RocksDB, as
// member/ builds it, with the Fsm consensus sees.
struct StateMachine {
  explicit StateMachine(const fs::path& dir) {
    fs::create_directories(dir);
    apply::StateMachineOptions o;
    o.min_lease_ttl_seconds = 2;
    EXPECT_FALSE(apply::StateMachine::open((dir / "db").string(), o, &state));
    store = state->store();
    fsm = std::make_unique<member::ApplierFsm>(state->applier());
  }
  ~StateMachine() {
    fsm.reset();
    state.reset();
  }

  // Every key with its revisions and value, and the store's revision.
  std::string state_text() { return testing::state_dump(*store); }

  std::unique_ptr<apply::StateMachine> state;
  mvcc::Store* store = nullptr;
  std::unique_ptr<member::ApplierFsm> fsm;
};

// What the leader's Peer service does with a forwarded call: every command
// decoded and admitted once (member/forwarded.h), or the whole call refused
// with the first error, before consensus copies the bytes into the log.
void propose_checked(consensus::Node& leader, std::vector<std::string> commands, std::function<void(Error)> done) {
  static member::Context ctx{};  // admit_forwarded reads only its limits (the defaults, as etcd's)
  for (const auto& c : commands) {
    apply::Command cmd;
    if (Error e = member::admit_forwarded(ctx, c, &cmd)) {
      done(e);
      return;
    }
  }
  leader.propose_forwarded(std::move(commands), std::move(done));
}

apply::Command put_command(const std::string& key, const std::string& value) {
  apply::Command c;
  c.mutable_put()->set_key(key);
  c.mutable_put()->set_value(value);
  return c;
}

std::string framed(const std::string& bytes) {
  std::string f;
  apply::append_framed(&f, bytes);
  return f;
}

class Cluster;

// Peer calls (consensus/forwarder.h) made straight on the target member's Node,
// as its Peer service would (server/peer_service.cc), and failing as the
// gRPC one does when the network between the two is cut.
class InProcessForwarder final : public consensus::Forwarder {
 public:
  InProcessForwarder(Cluster* cluster, uint64_t self) : cluster_(cluster), self_(self) {}
  void propose(const std::string& target, std::vector<std::string> commands, Timeout,
               std::function<void(Error)> done) override;
  void read_index(const std::string& target, Timeout, std::function<void(Error, uint64_t)> done) override;
  void removed(const std::string& target, uint64_t id) override;
  // Streams the target's state as Peer.FetchSnapshot does.
  Error fetch_snapshot(const std::string& target, uint64_t index,
                       const std::function<Error(const peer::SnapshotChunk&)>& fn) override;

 private:
  Cluster* cluster_;
  uint64_t self_;
};

class Cluster {
 public:
  Cluster(const fs::path& dir, unsigned snapshot_threshold, unsigned snapshot_trailing)
      : dir_(dir),
        snapshot_threshold_(snapshot_threshold),
        snapshot_trailing_(snapshot_trailing),
        net_(std::make_shared<testing::MemoryNetwork>()) {
    // A cut stream makes libraft's next write fail with EPIPE, not a signal
    // (the server's main() ignores SIGPIPE the same way).
    std::signal(SIGPIPE, SIG_IGN);
    members_.resize(kMembers);
  }
  ~Cluster() {
    net_->heal();
    for (unsigned i = 0; i < kMembers; ++i) kill(i);
  }

  static uint64_t id(unsigned i) { return i + 1; }
  static std::string address(unsigned i) { return "member-" + std::to_string(id(i)); }
  testing::MemoryNetwork& net() { return *net_; }
  std::vector<uint64_t> ids() const {
    std::vector<uint64_t> v;
    for (unsigned i = 0; i < kMembers; ++i) v.push_back(id(i));
    return v;
  }

  // Starts member i (new, or again on the log and database it left).
  void start(unsigned i) {
    auto m = std::make_shared<Running>();
    m->sm = std::make_unique<StateMachine>(dir_ / std::to_string(i) / "state");
    consensus::NodeOptions o;
    o.dir = (dir_ / std::to_string(i) / "raft").string();
    o.id = id(i);
    o.address = address(i);
    for (unsigned j = 0; j < kMembers; ++j) o.initial_cluster.push_back({id(j), address(j)});
    o.heartbeat_ms = kHeartbeatMs;
    o.election_ms = kElectionMs;
    o.snapshot_threshold = snapshot_threshold_;
    o.snapshot_trailing = snapshot_trailing_;
    o.io = net_->io_factory(id(i));
    o.forwarder = std::make_shared<InProcessForwarder>(this, id(i));
    o.on_removed = [this, i] { removed_[i] = true; };
    m->node = std::make_shared<consensus::Node>(o, m->sm->fsm.get());
    ASSERT_FALSE(m->node->start()) << "member " << i;
    std::lock_guard<std::mutex> lock(mu_);
    members_[i] = m;
  }
  void start_all() {
    for (unsigned i = 0; i < kMembers; ++i) start(i);
  }

  // Stops member i (its log and database stay for a restart).
  void kill(unsigned i) {
    std::shared_ptr<Running> m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      m.swap(members_[i]);
    }
    if (!m) return;
    m->node->stop();
  }
  bool alive(unsigned i) {
    std::lock_guard<std::mutex> lock(mu_);
    return members_[i] != nullptr;
  }

  std::shared_ptr<consensus::Node> node(unsigned i) {
    std::lock_guard<std::mutex> lock(mu_);
    return members_[i] ? members_[i]->node : nullptr;
  }
  std::shared_ptr<consensus::Node> node_at(const std::string& address) {
    for (unsigned i = 0; i < kMembers; ++i) {
      if (Cluster::address(i) == address) return node(i);
    }
    return nullptr;
  }
  // Reads member `address`'s state, at `min_index` or later.
  Error read_state(const std::string& address, uint64_t min_index, const member::StateVisitor& fn) {
    std::shared_ptr<Running> m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (unsigned i = 0; i < kMembers; ++i) {
        if (Cluster::address(i) == address) m = members_[i];
      }
    }
    if (!m) return errors::leader_changed();
    ++state_reads_;
    return member::stream_state(m->sm->state->applier()->engine(), min_index, fn);
  }
  int state_reads() const { return state_reads_.load(); }
  // Whether member i heard that it was removed from the cluster (NodeOptions::on_removed).
  bool removed(unsigned i) const { return removed_[i].load(); }

  std::string state(unsigned i) {
    std::shared_ptr<Running> m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      m = members_[i];
    }
    return m ? m->sm->state_text() : "";
  }

  // The live member that leads (and that the others, except `exclude`,
  // follow), once there is one; kMembers if none within kWait.
  unsigned wait_leader(unsigned exclude = kMembers) {
    for (auto until = Clock::now() + kWait; Clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
      for (unsigned i = 0; i < kMembers; ++i) {
        if (i == exclude || !alive(i) || !node(i)->progress().is_leader) continue;
        bool followed = true;
        for (unsigned j = 0; j < kMembers; ++j) {
          if (j == i || j == exclude || !alive(j)) continue;
          followed = followed && node(j)->progress().leader_id == id(i);
        }
        if (followed) return i;
      }
    }
    return kMembers;
  }

  apply::Result put(unsigned i, const std::string& key, const std::string& value) {
    auto p = std::make_shared<std::promise<apply::Result>>();
    auto f = p->get_future();
    member::propose_command(*node(i), put_command(key, value), [p](apply::Result&& r) { p->set_value(std::move(r)); });
    if (f.wait_for(kWait) != std::future_status::ready) {
      ADD_FAILURE() << "proposal on member " << i << " never answered";
      apply::Result r;
      r.error = errors::internal("never answered");
      return r;
    }
    return f.get();
  }

  Error read_barrier(unsigned i) {
    auto p = std::make_shared<std::promise<Error>>();
    auto f = p->get_future();
    node(i)->read_barrier([p](Error e) { p->set_value(e); });
    if (f.wait_for(kWait) != std::future_status::ready) return errors::internal("read barrier never answered");
    return f.get();
  }

  Error propose_forwarded(unsigned i, std::vector<std::string> commands) {
    auto p = std::make_shared<std::promise<Error>>();
    auto f = p->get_future();
    propose_checked(*node(i), std::move(commands), [p](Error e) { p->set_value(e); });
    if (f.wait_for(kWait) != std::future_status::ready) return errors::internal("never answered");
    return f.get();
  }

  // Waits until every live member applied the same index and holds the
  // same state; true if they did within kWait.
  bool converge() {
    for (auto until = Clock::now() + kWait; Clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
      std::vector<unsigned> live;
      for (unsigned i = 0; i < kMembers; ++i) {
        if (alive(i)) live.push_back(i);
      }
      bool same = true;
      consensus::Progress first = node(live[0])->progress();
      for (unsigned i : live) {
        consensus::Progress p = node(i)->progress();
        same = same && p.applied_index == first.applied_index && p.applied_index == p.commit_index &&
               p.commit_index == first.commit_index;
      }
      if (!same) continue;
      std::string s0 = state(live[0]);
      for (unsigned i : live) same = same && state(i) == s0;
      if (same) return true;
    }
    return false;
  }

 private:
  struct Running {
    std::unique_ptr<StateMachine> sm;
    std::shared_ptr<consensus::Node> node;
    ~Running() {
      node.reset();  // stopped before the state machine it applies to goes
      sm.reset();
    }
  };

  fs::path dir_;
  unsigned snapshot_threshold_;
  unsigned snapshot_trailing_;
  std::atomic<int> state_reads_{0};
  std::atomic<bool> removed_[kMembers] = {};
  std::shared_ptr<testing::MemoryNetwork> net_;
  std::mutex mu_;  // guards members_
  std::vector<std::shared_ptr<Running>> members_;
};

void InProcessForwarder::propose(const std::string& target, std::vector<std::string> commands, Timeout,
                                 std::function<void(Error)> done) {
  std::shared_ptr<consensus::Node> to = cluster_->node_at(target);
  // A call that never reaches the target is refused unproposed.
  if (!to || cluster_->net().blocked(self_, to->id()) || cluster_->net().blocked(to->id(), self_)) {
    done(errors::not_leader());
    return;
  }
  propose_checked(*to, std::move(commands), std::move(done));
}

void InProcessForwarder::read_index(const std::string& target, Timeout, std::function<void(Error, uint64_t)> done) {
  std::shared_ptr<consensus::Node> to = cluster_->node_at(target);
  if (!to || cluster_->net().blocked(self_, to->id()) || cluster_->net().blocked(to->id(), self_)) {
    done(errors::leader_changed(), 0);
    return;
  }
  to->read_index(std::move(done));
}

void InProcessForwarder::removed(const std::string& target, uint64_t) {
  if (std::shared_ptr<consensus::Node> to = cluster_->node_at(target)) to->removed_by_leader();
}

Error InProcessForwarder::fetch_snapshot(const std::string& target, uint64_t index,
                                        const std::function<Error(const peer::SnapshotChunk&)>& fn) {
  std::shared_ptr<consensus::Node> to = cluster_->node_at(target);
  if (!to || cluster_->net().blocked(self_, to->id()) || cluster_->net().blocked(to->id(), self_)) {
    return errors::leader_changed();
  }
  peer::SnapshotChunk chunk;
  size_t bytes = 0;
  Error e = cluster_->read_state(target, index, [&](storage::Cf cf, std::string_view key,
                                                          std::string_view value) -> Error {
    // Packed, as the peer service sends them (common/state_pairs.h).
    state_pairs::append(chunk.mutable_packed(), static_cast<uint32_t>(cf), key, value);
    bytes += key.size() + value.size() + 8;
    if (bytes < (64 << 10)) return {};
    Error fe = fn(chunk);
    chunk.Clear();
    bytes = 0;
    return fe;
  });
  if (e) return e;
  chunk.set_last(true);
  return fn(chunk);
}

bool contains(const std::string& state, const std::string& needle) { return state.find(needle) != std::string::npos; }

class ConsensusClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("etcdq-consensus-" + std::to_string(rd()));
    fs::create_directories(dir_);
    cluster_ = std::make_unique<Cluster>(dir_, snapshot_threshold_, snapshot_trailing_);
    cluster_->start_all();
  }
  void TearDown() override {
    cluster_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  unsigned other_than(unsigned a, unsigned b = kMembers) {
    for (unsigned i = 0; i < kMembers; ++i) {
      if (i != a && i != b) return i;
    }
    return kMembers;
  }

  fs::path dir_;
  unsigned snapshot_threshold_ = 8192;  // NodeOptions' defaults
  unsigned snapshot_trailing_ = 2048;
  std::unique_ptr<Cluster> cluster_;
};

// Snapshots every 16 entries, keeping 4 behind: a member down for a while
// can only catch up by installing one.
class ConsensusSnapshotTest : public ConsensusClusterTest {
 protected:
  ConsensusSnapshotTest() {
    snapshot_threshold_ = 16;
    snapshot_trailing_ = 4;
  }
};

TEST_F(ConsensusClusterTest, ElectsOneLeaderAndAppliesCommittedProposalsOnEveryMember) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  for (int i = 0; i < 20; ++i) {
    apply::Result r = cluster_->put(l, "k" + std::to_string(i % 7), "v" + std::to_string(i));
    ASSERT_FALSE(r.error) << r.error.message();
  }
  ASSERT_TRUE(cluster_->converge());
  std::string s = cluster_->state(0);
  EXPECT_TRUE(contains(s, "rev=21\n")) << s;
  EXPECT_TRUE(contains(s, "k6=v13 c8 m15 v2\n")) << s;
  for (unsigned i = 0; i < kMembers; ++i) EXPECT_EQ(cluster_->state(i), s) << "member " << i;
}

TEST_F(ConsensusClusterTest, ConcurrentProposalsShareLogEntries) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  uint64_t entries_before = cluster_->node(l)->entries_proposed();
  std::vector<std::future<apply::Result>> answers;
  constexpr int kProposals = 200;
  for (int i = 0; i < kProposals; ++i) {
    auto p = std::make_shared<std::promise<apply::Result>>();
    answers.push_back(p->get_future());
    member::propose_command(*cluster_->node(l), put_command("burst" + std::to_string(i), "x"),
                               [p](apply::Result&& r) { p->set_value(std::move(r)); });
  }
  for (auto& f : answers) {
    ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
    apply::Result r = f.get();
    EXPECT_FALSE(r.error) << r.error.message();
  }
  // Proposals queued while an entry is in flight are packed together.
  EXPECT_LT(cluster_->node(l)->entries_proposed() - entries_before, static_cast<uint64_t>(kProposals));
  ASSERT_TRUE(cluster_->converge());
  EXPECT_TRUE(contains(cluster_->state(other_than(l)), "burst199=x"));
}

// The leader stopped while proposals stream in: libraft hears of log writes
// in the check phase after raft_uv started the next one (consensus/node_impl.h,
// `written`), so a stop can find written appends not yet reported. Each
// proposal is answered (applied or stopped), and every one answered as
// applied is on the members after the leader restarts from its log.
TEST_F(ConsensusClusterTest, LeaderStoppedUnderProposalsAnswersEachAndKeepsWhatItAcknowledged) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  std::shared_ptr<consensus::Node> leader = cluster_->node(l);
  // Proposals stream in until the stop has returned: some are in the log
  // or in flight when it starts, the last ones are refused.
  constexpr int kMaxProposals = 200000;
  std::vector<std::future<apply::Result>> answers;
  std::atomic<int> answered{0};
  std::atomic<bool> stopped{false};
  std::thread stopper;
  for (int i = 0; i < kMaxProposals && !stopped.load(); ++i) {
    auto p = std::make_shared<std::promise<apply::Result>>();
    answers.push_back(p->get_future());
    member::propose_command(*leader, put_command("stream" + std::to_string(i), "x"), [p, &answered](apply::Result&& r) {
      answered.fetch_add(1);
      p->set_value(std::move(r));
    });
    if (i == 100) {
      // Stop once writes are flowing.
      while (answered.load() == 0) std::this_thread::yield();
      stopper = std::thread([leader, &stopped] {
        leader->stop();
        stopped.store(true);
      });
    }
  }
  stopper.join();
  std::vector<int> acknowledged;
  size_t refused = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    ASSERT_EQ(answers[i].wait_for(kWait), std::future_status::ready) << "proposal " << i;
    apply::Result r = answers[i].get();
    if (!r.error) {
      acknowledged.push_back(static_cast<int>(i));
    } else {
      EXPECT_EQ(r.error, errors::stopped()) << "proposal " << i << ": " << r.error.message();
      ++refused;
    }
  }
  ASSERT_FALSE(acknowledged.empty());
  EXPECT_GT(refused, 0u) << answers.size() << " proposals, all applied: the stop never overlapped them";
  leader.reset();
  cluster_->kill(l);
  cluster_->start(l);
  ASSERT_TRUE(cluster_->converge());
  for (unsigned m = 0; m < kMembers; ++m) {
    std::string s = cluster_->state(m);
    for (int i : acknowledged) EXPECT_TRUE(contains(s, "stream" + std::to_string(i) + "=x")) << "member " << m << " " << i;
  }
}

TEST_F(ConsensusClusterTest, FollowerProposalsAreForwardedToTheLeaderAndAnsweredOnceAppliedThere) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  unsigned f = other_than(l);
  apply::Result r = cluster_->put(f, "from-follower", "1");
  ASSERT_FALSE(r.error) << r.error.message();
  // The answer is the follower's own apply result (etcd answers a follower's
  // proposal once that member applied it).
  ASSERT_TRUE(std::holds_alternative<etcdserverpb::PutResponse>(r.response));
  EXPECT_EQ(cluster_->node(f)->entries_proposed(), 0u) << "a follower never proposes entries itself";
  EXPECT_TRUE(contains(cluster_->state(f), "from-follower=1"));
  ASSERT_TRUE(cluster_->converge());
  EXPECT_TRUE(contains(cluster_->state(l), "from-follower=1"));
}

TEST_F(ConsensusClusterTest, ReadBarrierAfterALeaderChangeSeesEveryAcknowledgedWrite) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  ASSERT_FALSE(cluster_->put(l, "x", "1").error);
  cluster_->kill(l);
  unsigned l2 = cluster_->wait_leader(l);
  ASSERT_LT(l2, kMembers);
  ASSERT_NE(l2, l);
  unsigned f = other_than(l, l2);
  ASSERT_FALSE(cluster_->put(l2, "x", "2").error);
  // The follower's read index comes from the new leader: once the barrier
  // passes, the write the new leader acknowledged is applied here.
  ASSERT_FALSE(cluster_->read_barrier(f));
  EXPECT_TRUE(contains(cluster_->state(f), "x=2 ")) << cluster_->state(f);
  ASSERT_FALSE(cluster_->read_barrier(l2));
  EXPECT_TRUE(contains(cluster_->state(l2), "x=2 "));
  cluster_->start(l);
  ASSERT_TRUE(cluster_->converge());
}

TEST_F(ConsensusClusterTest, PartitionedLeaderFailsItsProposalsWhileTheMajorityCommitsAndHealingConverges) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  ASSERT_FALSE(cluster_->put(l, "before", "1").error);
  cluster_->net().isolate(Cluster::id(l), cluster_->ids());
  // Proposed on the old leader after the cut: it can never commit there.
  auto stranded = std::make_shared<std::promise<apply::Result>>();
  auto stranded_answer = stranded->get_future();
  member::propose_command(*cluster_->node(l), put_command("stranded", "1"),
                             [stranded](apply::Result&& r) { stranded->set_value(std::move(r)); });
  unsigned l2 = cluster_->wait_leader(l);
  ASSERT_LT(l2, kMembers);
  ASSERT_NE(l2, l);
  ASSERT_FALSE(cluster_->put(l2, "after", "1").error);
  ASSERT_FALSE(cluster_->put(other_than(l, l2), "after-follower", "1").error);

  ASSERT_EQ(stranded_answer.wait_for(kWait), std::future_status::ready);
  Error e = stranded_answer.get().error;
  EXPECT_TRUE(e == errors::leader_changed() || e == errors::timeout()) << e.message();
  EXPECT_FALSE(cluster_->node(l)->progress().is_leader);

  cluster_->net().heal();
  ASSERT_TRUE(cluster_->converge());
  std::string s = cluster_->state(l);
  EXPECT_TRUE(contains(s, "after=1")) << s;
  EXPECT_TRUE(contains(s, "after-follower=1")) << s;
  EXPECT_FALSE(contains(s, "stranded")) << s;
}

TEST_F(ConsensusClusterTest, KilledFollowerRestartsFromItsLogAndCatchesUp) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  unsigned f = other_than(l);
  ASSERT_FALSE(cluster_->put(l, "early", "1").error);
  ASSERT_TRUE(cluster_->converge());
  cluster_->kill(f);
  for (int i = 0; i < 10; ++i) ASSERT_FALSE(cluster_->put(l, "while-down" + std::to_string(i), "1").error);
  cluster_->start(f);
  ASSERT_TRUE(cluster_->converge());
  EXPECT_TRUE(contains(cluster_->state(f), "while-down9=1"));
  EXPECT_TRUE(contains(cluster_->state(f), "early=1"));
  // And it serves linearizable reads again.
  ASSERT_FALSE(cluster_->read_barrier(f));
}

TEST_F(ConsensusClusterTest, BadBuildPeersForwardedCommandsAreRefusedBeforeTheyReachTheLog) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  ASSERT_FALSE(cluster_->put(l, "before", "1").error);
  ASSERT_TRUE(cluster_->converge());
  uint64_t last_before = cluster_->node(l)->progress().last_index;

  std::string good = framed(put_command("good", "1").SerializeAsString());
  std::string overlong = good;
  overlong[0] = static_cast<char>(overlong[0] + 8);  // the frame claims more bytes than it has
  std::string undecodable = framed(std::string(16, '\xff'));
  apply::Command assign;
  assign.mutable_queue_assign()->set_queue("q");
  std::string forged_assign = framed(assign.SerializeAsString());  // only the leader's own
  std::string two_frames = good + good;

  for (const auto& bad : {overlong, undecodable, forged_assign, two_frames, std::string()}) {
    Error e = cluster_->propose_forwarded(l, {bad});
    EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.message();
  }
  // One bad command refuses the whole call, the good ones with it.
  Error e = cluster_->propose_forwarded(l, {good, undecodable});
  EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.message();
  EXPECT_EQ(cluster_->node(l)->progress().last_index, last_before) << "nothing was appended";

  ASSERT_FALSE(cluster_->propose_forwarded(l, {good}));
  ASSERT_TRUE(cluster_->converge());
  std::string s = cluster_->state(l);
  EXPECT_TRUE(contains(s, "rev=3\n")) << s;
  EXPECT_TRUE(contains(s, "good=1 c3 m3 v1\n")) << s;
}

// What a leader with a bad build could get committed: it builds the entry
// itself, so no check of the leader's stands in the way.
void rewrite_marked(struct raft_buffer* buf) {
  std::string_view bytes(static_cast<const char*>(buf->base), buf->len);
  auto* out = static_cast<unsigned char*>(buf->base);
  auto frame_header = [out](uint32_t len) {
    for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(len >> (8 * i));
  };
  if (bytes.find("mark:overlong") != std::string_view::npos) {
    std::memset(out, 0, buf->len);
    frame_header(1u << 30);  // runs past the entry: the rest of the entry is skipped
  } else if (bytes.find("mark:undecodable") != std::string_view::npos) {
    std::memset(out, 0xff, buf->len);
    frame_header(static_cast<uint32_t>(buf->len - 8));
    std::memset(out + buf->len - 4, 0, 4);  // then the end of the batch
  } else if (bytes.find("mark:no-request") != std::string_view::npos) {
    apply::Command empty;  // decodes, carries no request
    empty.set_time_ms(1);
    std::string f = framed(empty.SerializeAsString());
    std::memset(out, 0, buf->len);
    std::memcpy(out, f.data(), f.size());
  }
}

TEST_F(ConsensusClusterTest, BadBuildLeadersMalformedEntriesApplyAsSkippedOnEveryMemberAndStopNone) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  ASSERT_FALSE(cluster_->put(l, "before", "1").error);
  cluster_->net().set_append_hook(Cluster::id(l), rewrite_marked);
  std::string padding(64, 'p');
  for (const char* mark : {"mark:overlong", "mark:undecodable", "mark:no-request"}) {
    // The proposal's own command is gone from the entry: it never gets a
    // result, and its proposer hears so once the entry applied.
    apply::Result r = cluster_->put(l, "victim", std::string(mark) + padding);
    EXPECT_TRUE(r.error) << mark;
  }
  cluster_->net().set_append_hook(Cluster::id(l), nullptr);
  ASSERT_FALSE(cluster_->put(l, "after", "1").error);
  unsigned f = other_than(l);
  ASSERT_FALSE(cluster_->put(f, "after-follower", "1").error);
  ASSERT_TRUE(cluster_->converge());
  for (unsigned i = 0; i < kMembers; ++i) {
    ASSERT_TRUE(cluster_->alive(i));
    std::string s = cluster_->state(i);
    EXPECT_FALSE(contains(s, "victim")) << s;
    EXPECT_TRUE(contains(s, "after=1 c3 m3 v1\n")) << s;
    EXPECT_TRUE(contains(s, "after-follower=1 c4 m4 v1\n")) << s;
  }
}


TEST_F(ConsensusClusterTest, FollowerProposalMadeWhileCutOffIsDeliveredOnceTheNetworkHeals) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  unsigned f = other_than(l);
  cluster_->net().isolate(Cluster::id(f), cluster_->ids());
  // Held by the follower (its forward fails unsent) and sent again once it
  // reaches a leader, well within the request timeout.
  auto answer = std::make_shared<std::promise<apply::Result>>();
  auto answered = answer->get_future();
  member::propose_command(*cluster_->node(f), put_command("held", "1"),
                             [answer](apply::Result&& r) { answer->set_value(std::move(r)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * kElectionMs));
  EXPECT_EQ(answered.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "answered while cut off";
  cluster_->net().heal();
  ASSERT_EQ(answered.wait_for(kWait), std::future_status::ready);
  apply::Result r = answered.get();
  EXPECT_FALSE(r.error) << r.error.message();
  ASSERT_TRUE(cluster_->converge());
  EXPECT_TRUE(contains(cluster_->state(l), "held=1 "));
}

TEST_F(ConsensusClusterTest, LeadershipTransferMakesTheChosenVoterLead) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  unsigned to = other_than(l);
  auto done = std::make_shared<std::promise<Error>>();
  auto transferred = done->get_future();
  cluster_->node(l)->transfer_leadership(Cluster::id(to), [done](Error e) { done->set_value(e); });
  ASSERT_EQ(transferred.wait_for(kWait), std::future_status::ready);
  Error e = transferred.get();
  ASSERT_FALSE(e) << e.message();
  EXPECT_EQ(cluster_->wait_leader(), to);
  ASSERT_FALSE(cluster_->put(to, "after-transfer", "1").error);
  ASSERT_TRUE(cluster_->converge());
}

TEST_F(ConsensusClusterTest, RemovedMemberIsToldAndTheOthersCommitWithoutIt) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  unsigned f = other_than(l);
  auto done = std::make_shared<std::promise<Error>>();
  auto removed = done->get_future();
  cluster_->node(l)->remove_member(Cluster::id(f), [done](Error e) { done->set_value(e); });
  ASSERT_EQ(removed.wait_for(kWait), std::future_status::ready);
  Error e = removed.get();
  ASSERT_FALSE(e) << e.message();
  for (auto until = Clock::now() + kWait; !cluster_->removed(f) && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(cluster_->removed(f)) << "the removed member was never told";
  cluster_->kill(f);  // as etcd's removed member exits
  EXPECT_EQ(cluster_->node(l)->members().size(), kMembers - 1);
  ASSERT_FALSE(cluster_->put(l, "after-removal", "1").error);
  ASSERT_FALSE(cluster_->put(other_than(l, f), "from-the-other", "1").error);
  ASSERT_TRUE(cluster_->converge());
}

TEST_F(ConsensusSnapshotTest, FollowerFarBehindInstallsTheLeadersSnapshotAndCatchesUp) {
  unsigned l = cluster_->wait_leader();
  ASSERT_LT(l, kMembers);
  unsigned f = other_than(l);
  ASSERT_FALSE(cluster_->put(l, "early", "1").error);
  ASSERT_TRUE(cluster_->converge());
  cluster_->kill(f);
  // Far past the leader's snapshots: the entries the follower misses are
  // gone from the leader's log.
  for (int i = 0; i < 60; ++i) ASSERT_FALSE(cluster_->put(l, "k" + std::to_string(i), std::to_string(i)).error);
  cluster_->start(f);
  ASSERT_TRUE(cluster_->converge());
  EXPECT_GT(cluster_->state_reads(), 0) << "the follower caught up without installing a snapshot";
  std::string s = cluster_->state(f);
  EXPECT_TRUE(contains(s, "k59=59 ")) << s;
  EXPECT_TRUE(contains(s, "early=1 ")) << s;
  // It goes on from the installed state.
  ASSERT_FALSE(cluster_->put(f, "after-install", "1").error);
  ASSERT_TRUE(cluster_->converge());
}

}  // namespace
}  // namespace etcdq
