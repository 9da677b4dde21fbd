// The work queues of QUEUES.md as a key-space plug-in (keyspace/kind.h):
// the only place that tells the rest of etcdq what /q/ and /queue/ keys
// mean. add_key_space() registers it (Member::open calls it); nothing
// outside queue/ names a queue.
//
// Keys (queue/keys.h), wherever a KV op meets them, top-level or inside a
// Txn:
//
//   Put    /q/{queue}/p/{tail}   produces: the Book stores the message at
//                                its next idx (no plain key is written);
//   Put    /q/{queue}/config     sets the queue's settings, and is stored
//                                as a plain key at /q/ whatever the prefix;
//   any other Put under /q/ or /queue/ is refused before it is proposed
//                                (InvalidArgument);
//   Delete (and Range, compares, plain watches) of /queue/ keys name the
//                                /q/ ones; a consumer-scoped ack names the
//                                message key;
//   Watch  /q/{queue}/c/{id}     makes the watch a consumer (queue/host.h).
//
// Permissions: a request needs its permission also over the plain keys it
// reaches (Kind::touches): a /queue/ read or delete the same range under
// /q/; a consumer Watch (read of /q/{queue}/c/{id}) the queue's messages; a
// consumer-scoped ack (write of /q/{queue}/c/{id}/{idx}/{tail}) the
// message; a produce (write of /q/{queue}/p/{tail}) every message of the
// queue, its index being unknown until apply.
//
// Commands: QueueAssign, the leader's deliveries (queue/scheduler.h), its
// own only: a forwarded one is refused.
//
// An instance owns a member's Book (apply side: the delete of any /q/ key —
// an ack, a lease expiry, a prefix delete — reaches the Book through the
// writer's delete tap; its counters go into the entry's batch; this
// member's deliveries go out once the batch is committed), its Host
// (consumer watches), and, once the member serves, its Scheduler and
// ClickHouse sink (leader-only work) and metrics (queue/metrics.h).
#pragma once

#include "keyspace/kind.h"
#include "queue/book.h"

namespace etcdq::queue {

// Registers the queues with the key-space registry (keyspace/registry.h);
// idempotent.
void add_key_space();

// The instance's Book, for tests and tools that drive apply directly:
// null when `i` is not a queue instance.
Book* book_of(keyspace::Instance* i);

}  // namespace etcdq::queue
