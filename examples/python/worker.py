"""A work-queue worker for etcdq with python-etcd3 (pip install etcd3).

    python3 worker.py --endpoint 127.0.0.1:2379 --queue jobs

It registers as a consumer of queue `jobs` by watching
/q/jobs/c/{a fresh id}; each message arrives on that watch as a PUT event
(key /q/jobs/{idx}/{tail}, value the payload). The worker handles it, then
acks by deleting that key. A message it does not ack (handle() raised, or
the worker died) is delivered again after the queue's visibility timeout,
to this or another worker: handle() must be safe to run twice for the same
message (at least once). Produce with `client.put("/q/jobs/p/anything", payload)`.
"""
import argparse
import sys
import uuid

import etcd3


def handle(key, value):
    """The work. Here: print it; replace with yours."""
    print("handled %s %s" % (key.decode(), value.decode(errors="replace")), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default="127.0.0.1:2379", help="host:port of any member")
    ap.add_argument("--queue", default="jobs")
    ap.add_argument("--max", type=int, default=0, help="stop after this many messages (0: run until killed)")
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--cacert", help="CA bundle: use TLS")
    args = ap.parse_args()

    host, port = args.endpoint.rsplit(":", 1)
    client = etcd3.client(host=host, port=int(port), user=args.user, password=args.password,
                          ca_cert=args.cacert)
    if args.user and not args.cacert:
        # python-etcd3 sends the auth token twice: as metadata and as gRPC call
        # credentials, which gRPC refuses over plaintext ("Established channel does not
        # have a sufficient security level"). The metadata is enough; with TLS keep both.
        client.call_credentials = None
        client.watcher._credentials = None
    consumer = "/q/%s/c/%s" % (args.queue, uuid.uuid4())
    events, cancel = client.watch(consumer)  # the consumer lives as long as this watch
    done = 0
    try:
        for event in events:
            if not isinstance(event, etcd3.events.PutEvent):
                continue
            try:
                handle(event.key, event.value)
            except Exception as e:  # not acked: delivered again after the visibility timeout
                print("failed %s: %s" % (event.key.decode(), e), file=sys.stderr, flush=True)
                continue
            client.delete(event.key)  # the ack
            done += 1
            if args.max and done >= args.max:
                break
    finally:
        cancel()
        client.close()


if __name__ == "__main__":
    main()
