#include "queue/key_space.h"

#include <atomic>
#include <cstdio>

#include "etcdq/peer.pb.h"
#include "keyspace/registry.h"
#include "queue/clickhouse.h"
#include "queue/config.h"
#include "queue/host.h"
#include "queue/keys.h"
#include "queue/metrics.h"
#include "queue/page.h"
#include "queue/rebuild.h"
#include "queue/scheduler.h"

namespace etcdq::queue {
namespace {

class QueueKind final : public keyspace::Kind {
 public:
  std::string_view name() const override { return "queue"; }

  bool owns(std::string_view key) const override { return in_queue_space(key); }
  void read_range(std::string* key, std::string* end) const override { canonicalize_read(key, end); }
  void delete_range(std::string* key, std::string* end) const override { canonicalize_delete(key, end); }

  void touches(std::string_view key, std::string_view end, bool write,
               std::vector<keyspace::Range>* out) const override {
    if (!in_queue_space(key)) return;
    // /queue/ reads and deletes touch /q/ (canonicalize_read, _delete: the
    // same rewrite for both when no consumer ack is involved).
    std::string k(key), e(end);
    canonicalize_read(&k, &e);
    if (k != key || e != end) out->emplace_back(k, e);
    Key q;
    if (!write && consumer_watch(k, e, &q)) {
      // A consumer watch is delivered the queue's messages.
      out->emplace_back(messages_begin(q.queue, 0), messages_end(q.queue));
    } else if (write && e.empty()) {
      q = parse(k);
      if (q.kind == KeyKind::kConsumerAck) {
        // A consumer-scoped ack deletes the message.
        out->emplace_back(message_key(q.queue, q.idx, q.tail), std::string());
      } else if (q.kind == KeyKind::kProduce) {
        // A produce writes a message at an index the apply picks.
        out->emplace_back(messages_begin(q.queue, 0), messages_end(q.queue));
      }
    }
  }

  Error validate_put(const etcdserverpb::PutRequest& r) const override {
    if (!in_queue_space(r.key())) return {};
    Key k = parse(r.key());
    switch (k.kind) {
      case KeyKind::kProduce: return {};
      case KeyKind::kConfig: {
        if (r.ignore_value()) return {};  // keeps the config it has
        Config c;
        return parse_config(r.value(), &c);
      }
      default:
        return {Code::kInvalidArgument,
                "etcdq: malformed queue key \"" + r.key() +
                    "\": produce with /q/{queue}/p/{tail} or set /q/{queue}/config (etcdq README, \"Work queues\")"};
    }
  }

  bool owns_command(const apply::Command& cmd) const override {
    return cmd.request_case() == apply::Command::kQueueAssign;
  }

  std::string check_command(const apply::Command& cmd, bool forwarded) const override {
    // The scheduler runs on the leader and proposes there; a follower never
    // forwards one, and a forged one could hand messages anywhere.
    if (forwarded) return "queue assignments are the leader's own";
    if (cmd.queue_assign().queue().empty()) return "queue assignment without a queue";
    return {};
  }

  std::unique_ptr<keyspace::Instance> open(const keyspace::InstanceEnv& env) const override;

  Error rebuild(storage::Engine* engine, int64_t now_ms, std::string* summary) const override {
    RebuildStats s;
    if (Error e = rebuild_records(engine, now_ms, &s)) return e;
    summary->clear();
    if (s.queues > 0) {
      char line[128];
      std::snprintf(line, sizeof line, "%lld queued messages in %lld queues, to be delivered again",
                    static_cast<long long>(s.messages), static_cast<long long>(s.queues));
      *summary = line;
    }
    return {};
  }
};

class QueueInstance final : public keyspace::Instance {
 public:
  QueueInstance(const QueueKind& kind, const keyspace::InstanceEnv& env)
      : kind_(kind), store_(env.store), self_(env.member_id), book_(env.engine) {
    book_.set_self(env.member_id);
    // Apply hands deliveries to the consumers hosted here and wakes the
    // scheduler (set before apply starts).
    Host* host = &host_;
    std::atomic<Scheduler*>* scheduler = &scheduler_ptr_;
    book_.set_deliver([host](std::vector<Delivery>&& d) { host->deliver(std::move(d)); });
    book_.set_revoke([host](std::vector<uint64_t>&& gone) { host->revoke(gone); });
    book_.set_changed([scheduler](std::vector<std::string>&& changed) {
      if (auto* s = scheduler->load()) s->changed(std::move(changed));
    });
  }
  ~QueueInstance() override { stop(); }

  const keyspace::Kind& kind() const override { return kind_; }
  Book* book() { return &book_; }

  Error put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t time_ms, etcdserverpb::PutResponse* resp,
            const PlainPut& plain) override {
    if (!in_queue_space(r.key())) return plain(r);
    Key k = parse(r.key());
    if (k.kind == KeyKind::kProduce) {
      // A new message never exists yet: nothing to keep or return.
      if (r.ignore_value() || r.ignore_lease()) return errors::key_not_found();
      book_.produce(w, k.queue, k.tail, r.value(), r.lease(), time_ms);
      resp->mutable_header()->set_revision(w.revision() + 1);
      return {};
    }
    if (k.kind == KeyKind::kConfig) {
      book_.config_put(w, k.queue, r.value());
      if (r.key() != config_key(k.queue)) {  // /queue/{queue}/config: stored at /q/
        etcdserverpb::PutRequest at_q = r;
        at_q.set_key(config_key(k.queue));
        return plain(at_q);
      }
    }
    return plain(r);
  }

  Error apply_command(mvcc::Writer& w, const apply::Command& cmd) override {
    book_.assign(w, cmd.queue_assign(), cmd.time_ms());
    return {};
  }

  void command_time(int64_t time_ms) override { book_.command_time(time_ms); }

  void begin_entry(mvcc::Writer& w) override {
    book_.begin_entry();
    Book* book = &book_;
    w.set_delete_tap([book](mvcc::Writer& wr, std::string_view key) {
      if (key.starts_with("/q/")) book->deleted(wr, key);
    });
  }
  void before_commit(mvcc::Writer& w) override { book_.before_commit(w); }
  void committed(int64_t revision) override { book_.committed(revision); }
  void restored() override { book_.reload(); }

  // A queue consumer (QUEUES.md) gets the messages the leader assigns it,
  // not the changes of its key.
  bool watch_created(mvcc::WatchSink* sink, int64_t watch_id, std::string_view key, std::string_view end) override {
    return host_.watch_created(sink, watch_id, key, end);
  }
  bool watch_canceled(mvcc::WatchSink* sink, int64_t watch_id) override { return host_.remove(sink, watch_id); }
  void stream_closed(mvcc::WatchSink* sink) override { host_.remove_all(sink); }

  void serve(const keyspace::MemberServices& m) override {
    // Consumers hosted here, and the scheduler that (on the leader) hands
    // messages to them (queue/scheduler.h).
    SchedulerOptions so;
    so.self = m.self;
    so.propose = m.propose;
    so.leader_target = m.leader_target;
    so.report = [report = m.report](const std::string& target, const peer::QueueConsumersRequest& req) {
      report(target, req);
    };
    so.skip = [](std::string_view q) {
      std::string_view table;
      return clickhouse_table(q, &table);
    };
    scheduler_ = std::make_unique<Scheduler>(&book_, &host_, so);
    scheduler_ptr_ = scheduler_.get();
    scheduler_->start();
    ClickHouseOptions cho;
    if (auto it = m.flags.find("clickhouse-url"); it != m.flags.end()) cho.url = it->second;
    if (auto it = m.flags.find("clickhouse-db"); it != m.flags.end()) cho.database = it->second;
    cho.propose = m.propose;
    clickhouse_ = std::make_unique<ClickHouseSink>(&book_, store_, cho);
    clickhouse_->start();
  }

  void set_leading(bool leading) override {
    // In the order the member's duties run theirs: started in this order,
    // stopped in reverse.
    if (leading) {
      if (scheduler_) scheduler_->set_leading(true);
      if (clickhouse_) clickhouse_->set_leading(true);
    } else {
      if (clickhouse_) clickhouse_->set_leading(false);
      if (scheduler_) scheduler_->set_leading(false);
    }
  }

  void stop() override {
    if (clickhouse_) clickhouse_->stop();
    if (scheduler_) scheduler_->stop();
    scheduler_ptr_ = nullptr;
  }

  bool peer_report(uint64_t from, const google::protobuf::Message& report) override {
    const auto* req = dynamic_cast<const peer::QueueConsumersRequest*>(&report);
    if (req == nullptr) return false;
    // Only members' reports reach here (the scheduler bounds their size).
    if (Scheduler* s = scheduler_ptr_.load()) {
      std::vector<ConsumerRef> consumers;
      for (const auto& r : req->consumers()) consumers.push_back({r.queue(), r.instance(), r.name()});
      s->reported(from, req->report(), req->part(), req->parts(), std::move(consumers));
    }
    return true;
  }

  void collect_metrics(int64_t now_ms, std::vector<prometheus::MetricFamily>* out) const override {
    queue::collect_metrics(book_, now_ms, holder_alive(), out);
  }

  bool page(std::string_view path, int64_t now_ms, const keyspace::MayRead& may_read,
            keyspace::Page* out) const override {
    PageInputs in;
    in.book = &book_;
    in.self = self_;
    in.alive = holder_alive();
    for (const auto& c : host_.consumers()) ++in.consumers[c.queue];
    return serve_page(in, path, now_ms, may_read, out);
  }

 private:
  // A consumer dropped here (or, on the leader, gone from its member's
  // report) holds nothing in flight any more (metrics.h).
  HolderAlive holder_alive() const {
    return [this](uint64_t member, uint64_t instance) {
      if (Scheduler* s = scheduler_ptr_.load()) return s->holder_alive(member, instance);
      return member != self_ || host_.has(instance);
    };
  }

  const QueueKind& kind_;
  mvcc::Store* store_;
  uint64_t self_;
  Book book_;
  Host host_;
  std::atomic<Scheduler*> scheduler_ptr_{nullptr};
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ClickHouseSink> clickhouse_;
};

std::unique_ptr<keyspace::Instance> QueueKind::open(const keyspace::InstanceEnv& env) const {
  return std::make_unique<QueueInstance>(*this, env);
}

}  // namespace

void add_key_space() { keyspace::add_kind(std::make_unique<QueueKind>()); }

Book* book_of(keyspace::Instance* i) {
  auto* q = dynamic_cast<QueueInstance*>(i);
  return q ? q->book() : nullptr;
}

}  // namespace etcdq::queue
