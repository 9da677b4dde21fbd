// A key space with a meaning of its own, plugged into an otherwise plain
// etcd (the work queues of QUEUES.md are one: src/queue/key_space.h). The
// layers that meet keys — auth/'s permission checks, apply/'s validation,
// KV ops and command dispatch, the Watch service, the member's services —
// ask the registry (registry.h) and never name a plug-in; the plug-in names
// none of them.
//
// A plug-in comes in two parts:
//
//   Kind      what its keys and commands mean: pure functions of bytes,
//             the same in every member (the leader validates a follower's
//             forwarded command with its own rules), registered once per
//             process (registry.h, add_kind).
//   Instance  one member's state of it, opened by Kind::open on the
//             member's database: its apply-thread side (puts it handles
//             itself, its own commands, entry hooks), its watch hooks and
//             its background services.
//
// A key belongs to at most one kind (owns); keys no kind owns keep their
// plain etcd meaning everywhere.
#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcdq/command.pb.h"
#include "mvcc/store.h"
#include "mvcc/watch_hub.h"
#include "mvcc/writer.h"
#include "storage/engine.h"

namespace google::protobuf {
class Message;
}

namespace etcdq::keyspace {

class Instance;

// A key range as range.h spells it: end "" is the single key, "\0" every
// key from `key` on.
using Range = std::pair<std::string, std::string>;

// What a kind's instance is opened with (Kind::open).
struct InstanceEnv {
  storage::Engine* engine = nullptr;  // the member's database
  mvcc::Store* store = nullptr;       // its MVCC store, on `engine`
  uint64_t member_id = 0;             // this member (0: none, a test's or tool's store)
};

// Pure: every method may be called from any thread, and answers only from
// its arguments.
class Kind {
 public:
  virtual ~Kind() = default;
  // Short and stable: logs, the apply chain's layer name (apply/chain.h).
  virtual std::string_view name() const = 0;

  // --- keys ---
  // True for the keys whose meaning this kind gives.
  virtual bool owns(std::string_view key) const = 0;
  // The plain range a Range, a txn compare or a plain watch of [key, end)
  // reads (an alias prefix names the stored keys). Called for every range;
  // leaves ranges outside the kind unchanged.
  virtual void read_range(std::string* key, std::string* end) const = 0;
  // The plain range a DeleteRange of [key, end) removes. As read_range.
  virtual void delete_range(std::string* key, std::string* end) const = 0;
  // The plain ranges a request over [key, end) reads (write = false) or
  // writes (write = true) besides [key, end) itself, so that a permission
  // on the request's own keys is not enough to reach others (auth/store.h,
  // check_op): appended to *out; none for ranges outside the kind.
  virtual void touches(std::string_view key, std::string_view end, bool write, std::vector<Range>* out) const = 0;
  // A Put of an owned key, checked before it is proposed (apply/validate.h):
  // etcd's code and this kind's message, or OK.
  virtual Error validate_put(const etcdserverpb::PutRequest& r) const = 0;

  // --- commands ---
  // True for the commands (by Command's request case) this kind's instances
  // apply; the apply chain hands them to it (apply/chain.h).
  virtual bool owns_command(const apply::Command& cmd) const = 0;
  // An owned command, checked before it enters the log (apply/command_check.h):
  // `forwarded` when another member sent it. "" lets it in; otherwise why
  // not, which the caller answers as a malformed command.
  virtual std::string check_command(const apply::Command& cmd, bool forwarded) const = 0;

  // --- state ---
  // This kind's state on a member's database (loaded from it).
  virtual std::unique_ptr<Instance> open(const InstanceEnv& env) const = 0;
  // The kind's records rebuilt from its keys alone, in a database that
  // holds keys but no records of it (one restored from an etcd snapshot
  // file; no member runs on it yet). `now_ms`: Unix ms. *summary: a line
  // for the operator, "" when there was nothing to rebuild.
  virtual Error rebuild(storage::Engine* engine, int64_t now_ms, std::string* summary) const = 0;
};

// What a member lends an instance's background services (Instance::serve).
// An HTTP page an instance serves (Instance::page): the body and its
// Content-Type.
struct Page {
  std::string content_type;
  std::string body;
  // It shows keys: with auth on, a requester without a valid token gets
  // the auth error instead (member::Member::page). A page that shows
  // nothing of the keys (a static one) is served to anyone.
  bool needs_user = false;
};
// Whether the requester of a page may read [key, end) (end "": the key).
using MayRead = std::function<bool(std::string_view key, std::string_view end)>;

struct MemberServices {
  uint64_t self = 0;  // this member's id
  // Proposes an internal command through the member's pipeline; `done`
  // once applied here or failed. Any thread.
  std::function<void(apply::Command, std::function<void(Error)>)> propose;
  // The leader's Peer target when it is another member, else "".
  std::function<std::string()> leader_target;
  // Sends a report to the member at `target` over the peer API; fire and
  // forget (consensus/forwarder.h, report).
  std::function<void(const std::string& target, const google::protobuf::Message& report)> report;
  // Flags the operator gave that a plug-in reads, by name without the
  // dashes ("clickhouse-url" for --clickhouse-url); a missing one is "".
  std::map<std::string, std::string, std::less<>> flags;
};

// One member's state of a kind. The apply side runs on the apply thread
// (apply/chain.h), inside the entry's mvcc::Writer; the rest on any thread.
class Instance {
 public:
  virtual ~Instance() = default;
  virtual const Kind& kind() const = 0;

  // --- apply thread ---
  // A Put of an owned key (validated, its lease known to exist), inside an
  // open Writer txn. `plain` stores a request as etcd's Put does
  // (apply/kv.h, put_plain); the instance calls it for what stays a plain
  // key, or handles the put itself and fills `resp`.
  using PlainPut = std::function<Error(const etcdserverpb::PutRequest& r)>;
  virtual Error put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t time_ms,
                    etcdserverpb::PutResponse* resp, const PlainPut& plain) = 0;
  // An owned command (Kind::owns_command), inside an open Writer txn; no
  // client answer but the error.
  virtual Error apply_command(mvcc::Writer& w, const apply::Command& cmd) = 0;
  // A DeleteRange or Txn command of the entry is about to apply; `time_ms`
  // is its proposer's clock (apply::Command.time_ms), the only time apply
  // may use. Optional.
  virtual void command_time(int64_t /*time_ms*/) {}
  // Before an entry's first command, after its last (before its batch is
  // written), once it is committed at `revision`, and after the whole state
  // was replaced by a snapshot's (apply/applier.h).
  virtual void begin_entry(mvcc::Writer& w) = 0;
  virtual void before_commit(mvcc::Writer& w) = 0;
  virtual void committed(int64_t revision) = 0;
  virtual void restored() = 0;

  // --- watches, any thread (the Watch service) ---
  // A watch was created on `sink` as `watch_id` over [key, end): true when
  // the instance takes it (the watch hub then does not).
  virtual bool watch_created(mvcc::WatchSink* sink, int64_t watch_id, std::string_view key,
                             std::string_view end) = 0;
  // The watch was canceled: true when the instance held it. After this,
  // `sink` is not called for it.
  virtual bool watch_canceled(mvcc::WatchSink* sink, int64_t watch_id) = 0;
  // The stream behind `sink` ends: none of its watches is called again.
  virtual void stream_closed(mvcc::WatchSink* sink) = 0;

  // --- the member's services, any thread ---
  // Starts the instance's background work once the member serves.
  virtual void serve(const MemberServices& m) = 0;
  // Leader-only work runs between set_leading(true) and set_leading(false)
  // (member/leader_duties.h).
  virtual void set_leading(bool leading) = 0;
  // Stops what serve started; idempotent. Before the consensus node stops.
  virtual void stop() = 0;
  // A peer's report (Instance::serve's MemberServices::report on another
  // member): true when the instance takes this message type. `from` is a
  // member of the cluster (the caller checked).
  virtual bool peer_report(uint64_t from, const google::protobuf::Message& report) = 0;
  // Appends the instance's families for /metrics. `now_ms`: Unix ms.
  virtual void collect_metrics(int64_t now_ms, std::vector<prometheus::MetricFamily>* out) const = 0;
  // A page of the instance's own on the member's HTTP ports (e.g. the
  // queues' /queues): true and `out` filled when it serves `path`. The
  // page shows only what `may_read` allows (the requester's read
  // permission over [key, end), as the client port checks it). Any thread.
  virtual bool page(std::string_view path, int64_t now_ms, const MayRead& may_read, Page* out) const {
    (void)path, (void)now_ms, (void)may_read, (void)out;
    return false;
  }
};

}  // namespace etcdq::keyspace
