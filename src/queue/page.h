// The queues' page on the member's HTTP ports (keyspace::Instance::page):
//
//   GET /queues        a self-contained HTML page that polls /queues.json
//                      every second and shows, per queue, depth, in flight,
//                      produce and ack rates (from two polls' counters),
//                      oldest age, consumers here and dead letters; with
//                      auth on it asks for a user and password and keeps
//                      the token the JSON gateway's /v3/auth/authenticate
//                      gives (session storage) for its polls
//   GET /queues.json   {"member": "<id hex>", "time_ms": <Unix ms>,
//                       "queues": [{"name", "depth", "in_flight",
//                       "produced", "delivered", "redelivered", "acked",
//                       "dead_lettered", "oldest_age_seconds",
//                       "consumers", "dead_letter_queue",
//                       "dead_letter_depth"}, ...], "truncated": bool}
//   GET /queues.json/NAME  the same with at most queue NAME's entry (the
//                      path percent-decoded; none when the member holds
//                      nothing for NAME or the requester may not read
//                      it): what `etcdq queue stat` reads (ctl.h)
//
// Who sees what: a queue is listed only when the requester may Range its
// whole prefix /q/{queue}/ on the client port (member::Member::page gives
// the check): the page shows counts and names, never payloads, but names
// are keys. Counters are replicated (every member shows the same);
// consumers are those this member hosts; in flight counts what this member
// knows alive (metrics.h). At most kMaxQueues queues, in name order.
//
// Pure over its inputs; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "keyspace/kind.h"
#include "queue/book.h"
#include "queue/metrics.h"

namespace etcdq::queue {

struct PageInputs {
  const Book* book = nullptr;
  uint64_t self = 0;
  HolderAlive alive;
  std::map<std::string, size_t, std::less<>> consumers;  // hosted here, by queue
};

// True for the paths above, with `out` filled.
bool serve_page(const PageInputs& in, std::string_view path, int64_t now_ms, const keyspace::MayRead& may_read,
                keyspace::Page* out);

constexpr size_t kMaxQueues = 1000;

}  // namespace etcdq::queue
