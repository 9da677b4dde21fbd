#!/usr/bin/python3
"""Leases, etcd 3.4 against etcdq, each a fresh single member (A B A B):

1. keep-alive throughput: etcd's `benchmark lease-keepalive`;
2. 100,000 leases (TTL --ttl s), one key each: RSS after granting, and how
   late each key's deletion arrives on a watch after the grant was sent + TTL
   (a negative lateness would be an early expiry).

    bench/lease_side_by_side.py [--rounds 1] [--leases 100000] [--ttl 15]
"""
import argparse, os, statistics, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side as sbs  # noqa: E402

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402


def grant_leases(url, n, ttl, inflight=512):
    ch = grpc.insecure_channel(url.replace("http://", ""))
    lease, kv = rpc_pb2_grpc.LeaseStub(ch), rpc_pb2_grpc.KVStub(ch)
    acked = {}
    pending = []
    for i in range(n):
        # The send time: no server may expire the lease before send + TTL.
        acked[i] = time.monotonic()
        pending.append((i, lease.LeaseGrant.future(rpc_pb2.LeaseGrantRequest(TTL=ttl))))
        if len(pending) >= inflight or i == n - 1:
            puts = []
            for j, f in pending:
                r = f.result()
                puts.append(kv.Put.future(rpc_pb2.PutRequest(key=b"/lease/%08d" % j, value=b"x", lease=r.ID)))
            for f in puts:
                f.result()
            pending = []
    ch.close()
    return acked


def watch_deletes(url, n, seen, done):
    ch = grpc.insecure_channel(url.replace("http://", ""))
    w = rpc_pb2_grpc.WatchStub(ch)
    req = rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"/lease/", range_end=b"/lease0"))
    stream = w.Watch(iter([req] + [None] * 0))
    try:
        for resp in stream:
            now = time.monotonic()
            for ev in resp.events:
                if ev.type == 1:
                    seen[int(ev.kv.key[7:])] = now
            if len(seen) >= n:
                break
            if done.is_set():
                break
    except grpc.RpcError:
        pass
    ch.close()


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etcdq", default=os.path.join(sbs.ROOT, "build", "etcdq"))
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--leases", type=int, default=100000)
    ap.add_argument("--ttl", type=int, default=15)
    a = ap.parse_args()
    tool = subprocess.run(["bash", os.path.join(sbs.SHARED, "tools", "etcd-benchmark.sh")],
                          capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    rows = {}
    for rnd in range(a.rounds):
        for name, binary in (("etcd", a.etcd), ("etcdq", a.etcdq)):
            srv = sbs.Server(binary, name)
            try:
                ka = sbs.run_benchmark(tool, srv.url, ["--conns", "100", "--clients", "1000", "lease-keepalive",
                                                       "--total", "100000"])
                rss0 = rss_mib(srv.proc.pid)
                seen, done = {}, threading.Event()
                t = threading.Thread(target=watch_deletes, args=(srv.url, a.leases, seen, done), daemon=True)
                t.start()
                time.sleep(1)
                start = time.monotonic()
                acked = grant_leases(srv.url, a.leases, a.ttl)
                grant_s = time.monotonic() - start
                rss1 = rss_mib(srv.proc.pid)
                deadline = time.monotonic() + a.ttl + 120
                while len(seen) < a.leases and time.monotonic() < deadline:
                    time.sleep(0.5)
                done.set()
                late = sorted(seen[i] - (acked[i] + a.ttl) for i in seen)
                row = dict(keepalive_rps=ka[0], keepalive_p99_ms=ka[2] * 1000, grant_per_s=a.leases / grant_s,
                           rss_before=rss0, rss_after=rss1, expired=len(seen),
                           late_p50=late[len(late) // 2] if late else None,
                           late_p99=late[int(len(late) * 0.99)] if late else None,
                           late_max=late[-1] if late else None, early=sum(1 for x in late if x < -0.001))
                print(f"round {rnd + 1} {name:6} {row}", flush=True)
                rows.setdefault(name, []).append(row)
            finally:
                srv.stop()
                os.sync()
                time.sleep(3)
    print("\n| measure | etcd | etcdq |\n| --- | ---: | ---: |")
    for k, label in (("keepalive_rps", "keep-alive req/s (1000 clients)"), ("keepalive_p99_ms", "keep-alive p99 ms"),
                     ("grant_per_s", "grant+put per s (512 in flight)"), ("rss_before", "RSS before leases, MiB"),
                     ("rss_after", f"RSS with {a.leases} leases+keys, MiB"), ("expired", "keys deleted by expiry"),
                     ("late_p50", "expiry lateness p50, s"), ("late_p99", "expiry lateness p99, s"),
                     ("late_max", "expiry lateness max, s"), ("early", "deleted before TTL")):
        vals = []
        for name in ("etcd", "etcdq"):
            xs = [r[k] for r in rows.get(name, []) if r[k] is not None]
            vals.append(f"{statistics.median(xs):.2f}" if xs else "-")
        print(f"| {label} | {vals[0]} | {vals[1]} |")


if __name__ == "__main__":
    main()
