#include "queue/rebuild.h"

#include <cstdint>
#include <map>
#include <string>

#include "etcd/api/mvccpb/kv.pb.h"
#include "etcdq/command.pb.h"
#include "mvcc/codec.h"
#include "queue/book.h"
#include "queue/keys.h"
#include "storage/batch.h"
#include "storage/iterator.h"
#include "storage/snapshot.h"

namespace etcdq::queue {
namespace {

constexpr size_t kBatchBytes = 4 << 20;

}  // namespace

Error rebuild_records(storage::Engine* engine, int64_t now_ms, RebuildStats* stats) {
  std::map<std::string, apply::QueueCounters, std::less<>> counters;
  storage::Batch batch(engine);
  storage::Snapshot snap(engine);
  storage::Iterator it = snap.bulk_iterator(storage::Cf::kLatest);
  std::string last_queue;  // the message before, to skip a second tail at one idx
  uint64_t last_idx = 0;
  for (it.seek("/q/"); it.valid() && it.key().starts_with("/q/"); it.next()) {
    Key k = parse(it.key());
    // Keys an etcd user wrote could give one idx two tails (they sort next
    // to each other): the first is the message, the others stay plain keys.
    // The last idx there is has no successor; it stays a plain key too.
    if (k.kind == KeyKind::kMessage) {
      if ((k.queue == last_queue && k.idx == last_idx) || k.idx == UINT64_MAX) continue;
      last_queue.assign(k.queue);
      last_idx = k.idx;
    }
    if (k.kind == KeyKind::kConfig && it.key() == config_key(k.queue)) {
      mvccpb::KeyValue kv;
      if (!mvcc::decode_record(it.value(), &kv)) return errors::internal("restore: unreadable record just written");
      batch.put(storage::Cf::kMeta, config_meta_key(k.queue), kv.value());
    } else if (k.kind == KeyKind::kMessage) {
      apply::QueueMessage m;
      m.set_tail(std::string(k.tail));
      m.set_produced_ms(now_ms);
      batch.put(storage::Cf::kMeta, message_meta_key(k.queue, k.idx), m.SerializeAsString());
      auto c = counters.find(k.queue);
      if (c == counters.end()) c = counters.emplace(std::string(k.queue), apply::QueueCounters{}).first;
      c->second.set_next_idx(std::max<uint64_t>(c->second.next_idx(), k.idx + 1));
      c->second.set_depth(c->second.depth() + 1);
      c->second.set_produced(c->second.produced() + 1);
      ++stats->messages;
    } else {
      continue;
    }
    if (batch.data_size() >= kBatchBytes) {
      if (Error e = engine->write(batch)) return e;
      batch.clear();
    }
  }
  for (const auto& [name, c] : counters) batch.put(storage::Cf::kMeta, counters_key(name), c.SerializeAsString());
  batch.put(storage::Cf::kMeta, restore_base_key(), "pending");
  stats->queues = static_cast<int64_t>(counters.size());
  return engine->write(batch);
}

}  // namespace etcdq::queue
