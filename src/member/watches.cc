#include "member/watches.h"

#include "mvcc/metrics.h"

namespace etcdq::member::watches {

using etcdserverpb::WatchCreateRequest;

int64_t revision(const Context& ctx) { return ctx.store->watch_hub().revision(); }

WatchSpec spec_of(const Context& ctx, const WatchCreateRequest& c, int64_t current_revision) {
  WatchSpec spec;
  spec.key = c.key();
  spec.end = c.range_end();
  ctx.keys->read_range(&spec.key, &spec.end);
  spec.start_revision = c.start_revision() > 0 ? c.start_revision() : current_revision + 1;
  spec.prev_kv = c.prev_kv();
  spec.progress_from = c.start_revision() > 0 ? c.start_revision() : 0;
  for (int f : c.filters()) {
    if (f == WatchCreateRequest::NOPUT) spec.no_put = true;
    if (f == WatchCreateRequest::NODELETE) spec.no_delete = true;
  }
  return spec;
}

void create(Context& ctx, WatchSink* sink, int64_t id, const WatchCreateRequest& c, const WatchSpec& spec) {
  if (!ctx.plugins || !ctx.plugins->watch_created(sink, id, c.key(), c.range_end())) {
    ctx.store->watch_hub().add(sink, id, spec);
  }
}

bool cancel(Context& ctx, WatchSink* sink, int64_t id) {
  bool existed = ctx.store->watch_hub().remove(sink, id);
  if (ctx.plugins && ctx.plugins->watch_canceled(sink, id)) existed = true;
  return existed;
}

void events_queued(size_t n) { mvcc::mvcc_metrics().pending_events.Increment(static_cast<double>(n)); }

void events_sent(size_t n) {
  mvcc::MvccMetrics& m = mvcc::mvcc_metrics();
  m.pending_events.Decrement(static_cast<double>(n));
  m.events.Increment(static_cast<double>(n));
}

void events_dropped(size_t n) { mvcc::mvcc_metrics().pending_events.Decrement(static_cast<double>(n)); }

void close(Context& ctx, WatchSink* sink) {
  ctx.store->watch_hub().remove_all(sink);
  if (ctx.plugins) ctx.plugins->stream_closed(sink);
}

void add(Context& ctx, WatchSink* sink, int64_t id, const WatchSpec& spec) {
  ctx.store->watch_hub().add(sink, id, spec);
}

void remove(Context& ctx, WatchSink* sink, int64_t id) { ctx.store->watch_hub().remove(sink, id); }

void wake(Context& ctx) { ctx.store->watch_hub().wake(); }

bool if_synced(const Context& ctx, WatchSink* sink, int64_t id, const std::function<void(int64_t revision)>& fn) {
  return ctx.store->watch_hub().if_synced(sink, id, fn);
}

bool if_all_synced(const Context& ctx, WatchSink* sink, const std::function<void(int64_t revision)>& fn) {
  return ctx.store->watch_hub().if_all_synced(sink, fn);
}

bool defer(void (*fn)(void*, bool), void* arg) { return mvcc::WatchHub::defer(fn, arg); }

}  // namespace etcdq::member::watches
