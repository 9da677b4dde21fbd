// The key spaces of this process (kind.h) and the questions the layers
// above ask of them, so that none of those layers names a plug-in.
//
// Why its own layer, between mvcc/ and auth/: the lowest layers that must
// ask are auth/ (which keys a request touches) and apply/ (what a Put or a
// command means), and a plug-in's state lives on mvcc/'s writer and watch
// hub; mvcc/ itself gives no key a meaning, so the registry sits on it and
// under both. A plug-in (queue/) depends on this layer and nothing above.
//
// Kinds: registered once at start-up (add_kind; Member::open wires the
// work queues in), before any member opens, and never removed; every
// member of a cluster must run the same kinds. The free functions below
// read them and may be called from any thread.
//
// Instances: one member's set, opened by Instances::open on its database
// (apply/state_machine.h) for every kind registered then.
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"
#include "keyspace/kind.h"

namespace etcdq::keyspace {

// Registers `kind`; a second kind of the same name is ignored (a restart
// in one process, tests). Not concurrent with anything else here.
void add_kind(std::unique_ptr<Kind> kind);
// Every kind registered, in registration order.
const std::vector<std::unique_ptr<Kind>>& kinds();

// The kind that owns `key`; null for a plain key.
const Kind* owner(std::string_view key);
// The kind that applies `cmd` (Kind::owns_command); null: none.
const Kind* command_owner(const apply::Command& cmd);

// Kind::read_range, delete_range, touches and validate_put of every kind,
// in turn (a range outside every kind comes back unchanged, touches none,
// a put of a plain key is valid).
void read_range(std::string* key, std::string* end);
void delete_range(std::string* key, std::string* end);
std::vector<Range> touches(std::string_view key, std::string_view end, bool write);
Error validate_put(const etcdserverpb::PutRequest& r);

// One member's instances, one per kind. Thread-safety: the set is fixed
// once opened; each instance says its own.
class Instances {
 public:
  // Opens an instance of every kind registered now.
  static std::unique_ptr<Instances> open(const InstanceEnv& env);
  // An empty set: every key plain (a store without plug-ins).
  Instances() = default;

  const std::vector<std::unique_ptr<Instance>>& all() const { return all_; }
  // The instance of the kind named `name`; null: none.
  Instance* find(std::string_view name) const;

  // The Watch service's hooks, over every instance (Instance's): the first
  // that takes a watch has it.
  bool watch_created(mvcc::WatchSink* sink, int64_t watch_id, std::string_view key, std::string_view end);
  bool watch_canceled(mvcc::WatchSink* sink, int64_t watch_id);
  void stream_closed(mvcc::WatchSink* sink);
  // The member's: serve, leadership, stop, peer reports and metrics.
  void serve(const MemberServices& m);
  void set_leading(bool leading);
  void stop();
  // True when an instance took the report.
  bool peer_report(uint64_t from, const google::protobuf::Message& report);
  void collect_metrics(int64_t now_ms, std::vector<prometheus::MetricFamily>* out) const;
  // The first instance that serves `path` (Instance::page) fills `out`: true.
  bool page(std::string_view path, int64_t now_ms, const MayRead& may_read, Page* out) const;

 private:
  std::vector<std::unique_ptr<Instance>> all_;
};

}  // namespace etcdq::keyspace
