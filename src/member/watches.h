// The member's watch calls as the Watch service and the in-process client
// need them, shaped like etcd's Watchable (server/storage/mvcc/watchable_store.go
// NewWatchStream, Watch, Cancel, RequestProgress(All)): one call per thing
// a watch stream does, over the member's watch hub (mvcc/watch_hub.h says
// how events reach a sink without making apply wait) and the key-space
// plug-ins' watch hooks (keyspace/registry.h). A stream is a WatchSink;
// watcher ids are the stream's own (etcd's WatchID), per sink.
//
// Thread-safety: any thread; sinks are called with the hub lock held and
// must not block or call back into these functions (mvcc/watch_hub.h).
#pragma once

#include <cstdint>
#include <functional>

#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "member/context.h"
#include "mvcc/watch_hub.h"

namespace etcdq::member {

// What a watch stream implements and what it is handed (mvcc/watch_hub.h):
// a batch of one watcher's events of one revision, each serialized once.
using WatchSink = mvcc::WatchSink;
using WatchBatch = mvcc::WatchBatch;
using WatchSpec = mvcc::WatchSpec;
using EventRef = mvcc::EventRef;

namespace watches {

// The last revision whose events went to synced watchers: where a new
// watcher without a start revision starts (after it), and the header
// revision of create and cancel answers.
int64_t revision(const Context& ctx);

// What a create watches: its range as the key space maps reads (a plug-in's
// alias prefix, keyspace/kind.h), from start_revision or the one after
// `current_revision`, prev_kv and the filters; progress only once the hub
// reaches the client's own start revision.
WatchSpec spec_of(const Context& ctx, const etcdserverpb::WatchCreateRequest& c, int64_t current_revision);

// A client stream's watcher `id` for create request `c` (permission and
// range already checked by the service): a key-space plug-in that claims
// the range takes it (a queue consumer gets the messages assigned to it),
// else the hub delivers `spec`'s events to `sink`.
void create(Context& ctx, WatchSink* sink, int64_t id, const etcdserverpb::WatchCreateRequest& c,
            const WatchSpec& spec);
// Ends watcher `id` of `sink`, in the hub and the plug-ins; whether either
// had it. After it returns, `sink` is not called for it.
bool cancel(Context& ctx, WatchSink* sink, int64_t id);
// Ends every watcher of `sink` (its stream closes); idempotent.
void close(Context& ctx, WatchSink* sink);

// The watch event counters (mvcc/metrics.h), kept by the streams that
// queue and write the events (etcd's watchableStore and v3rpc watch.go):
// `n` events joined a stream's queue; were written to its client (also
// counted in etcd_debugging_mvcc_events_total); or were dropped unwritten
// (the stream ended). etcd_debugging_mvcc_pending_events_total is queued
// less written and dropped. Any thread; atomics only.
void events_queued(size_t n);
void events_sent(size_t n);
void events_dropped(size_t n);

// An in-process watcher of the hub alone (the Lock and Election recipes):
// no plug-in hook.
void add(Context& ctx, WatchSink* sink, int64_t id, const WatchSpec& spec);
void remove(Context& ctx, WatchSink* sink, int64_t id);

// A sink has room again: its watchers that fell behind may catch up.
void wake(Context& ctx);

// etcd's progress (watchable_store.go progressIfSync / progressAll): runs
// `fn(revision)` under the hub lock when watcher `id` of `sink` (if_synced)
// or every watcher of `sink` (if_all_synced, at least one) has every event
// up to the last published `revision`; whether fn ran. fn must not block.
bool if_synced(const Context& ctx, WatchSink* sink, int64_t id, const std::function<void(int64_t revision)>& fn);
bool if_all_synced(const Context& ctx, WatchSink* sink, const std::function<void(int64_t revision)>& fn);

// For a sink inside offer() on the apply thread: runs `fn(arg, here)`
// there once the pass is dispatched and the hub lock is released (`here`:
// start the write on this thread; false: hand it to a thread of your own;
// mvcc/watch_hub.h WatchHub::defer); false when it cannot (the caller
// hands the work to a thread of its own now).
bool defer(void (*fn)(void* arg, bool here), void* arg);

}  // namespace watches
}  // namespace etcdq::member
