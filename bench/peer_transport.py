#!/usr/bin/python3
"""3-member put cost of the Raft transport: binaries side by side, interleaved.

    /usr/bin/python3 bench/peer_transport.py --bin new=build/etcdq --bin old=/path/etcdq [--rounds 3]

For each round and each binary (A B A B ...), a fresh 3-member cluster
(cluster_side_by_side.py's Cluster: loopback, free ports, --heartbeat-interval
100 --election-timeout 1000 --snapshot-count 100000) runs etcd's `benchmark`:
  put, 1 client, 2000 sequential puts, to the leader's endpoint, then to a
    follower's (p50: the latency one write pays on each path);
  put, 1000 clients on 100 connections over all three endpoints (req/s).
Prints each run, then the median and the range (min-max) over rounds.
"""
import argparse, os, statistics, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cluster_side_by_side as csb  # noqa: E402
import side_by_side as sbs  # noqa: E402

PUT_1 = ["--conns", "1", "--clients", "1", "put", "--key-size", "8", "--sequential-keys", "--val-size", "256",
         "--total", "2000"]
PUT_1000 = ["--conns", "100", "--clients", "1000", "put", "--key-size", "8", "--sequential-keys", "--val-size",
            "256", "--total", "50000"]


def one_round(label, binary, tool, root):
    c = csb.Cluster(label, binary, root, 100, 1000, 100000)
    c.pre_vote = True
    try:
        c.start()
        leader, _ = c.leader()
        follower = (leader + 1) % len(c.members)
        out = {}
        for name, endpoints, args in [("p50 leader 1 client", c.members[leader].endpoint, PUT_1),
                                      ("p50 follower 1 client", c.members[follower].endpoint, PUT_1),
                                      ("put/s 1000 clients", c.endpoints, PUT_1000)]:
            r = sbs.parse_benchmark(sbs.benchmark_output(tool, endpoints, args))
            if r["errors"]:
                print(f"  {label} {name}: errors {r['errors']}", flush=True)
            out[name] = r["rps"] if name.startswith("put/s") else r["p50"] * 1000
        c.check_alive("after the runs")
        return out
    finally:
        c.stop()
        c.remove()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="label=path, repeatable")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    tool = sbs.benchmark_tool()
    root = os.environ.get("BENCH_DIR", "/var/tmp")
    results = {label: [] for label, _ in bins}
    with tempfile.TemporaryDirectory(prefix="peer-transport-", dir=root) as tmp:
        for rnd in range(a.rounds):
            for label, binary in bins:
                r = one_round(label, binary, tool, tmp)
                results[label].append(r)
                print(f"round {rnd + 1} {label:8} " + "  ".join(f"{k} {v:8.2f}" for k, v in r.items()), flush=True)
    print()
    print("| binary | metric | median | min | max |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, _ in bins:
        for k in results[label][0]:
            vs = [r[k] for r in results[label]]
            print(f"| {label} | {k} | {statistics.median(vs):.2f} | {min(vs):.2f} | {max(vs):.2f} |")


if __name__ == "__main__":
    main()
