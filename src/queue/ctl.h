// `etcdq queue ...`: look at and steer the queues of any etcdq cluster over
// the etcd v3 API (gRPC KV and Auth), with etcdctl's connection flags
// (--endpoints, --cacert, --cert, --key, --user, --password,
// --insecure-skip-tls-verify, --dial-timeout, --command-timeout):
//
//   ls                 every queue holding messages or a config: name, depth
//                      (one keys-only Range a queue, skipping its messages)
//   stat NAME          depth, oldest and newest message, dead letters
//                      waiting in NAME.dlq, the settings in force (keys);
//                      then in flight, consumers, oldest age, produce,
//                      delivery and ack rates and counters from the same
//                      member's GET /queues.json/NAME (page.h) on the same
//                      port, TLS settings and token, read twice
//                      --interval seconds apart (1) for the rates, or
//                      from --http-endpoint URL (a member's
//                      --listen-client-http-urls); when that fails, one
//                      line says why and the rest stands
//   peek NAME [N]      the first N messages (10), oldest first, without
//                      delivering or changing them
//   redrive NAME.dlq   each dead letter back into its queue as a new
//                      message (its payload and tail): one Txn a message
//                      that produces it and deletes the dead letter if it is
//                      still there, so a message is never lost or doubled
//                      by two redrives at once
//   purge NAME         deletes every message of NAME (counted as acks);
//                      its config stays
//
// The user names queues, never keys. Errors: one line on stderr, exit 1.
// Counters, in flight and consumers have no key in the KV API: the member
// keeps them (book.h, metrics.h) and shows them on /queues.json.
#pragma once

namespace etcdq::queue {

// argv[0] is "queue". Returns the process exit code.
int ctl_main(int argc, char** argv);

}  // namespace etcdq::queue
