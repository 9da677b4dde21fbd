#!/usr/bin/python3
"""The cost of peer TLS on a 3-member put run: plain http:// peer URLs against
https:// ones with mutual TLS (--peer-cert-file, --peer-key-file,
--peer-trusted-ca-file, --peer-client-cert-auth), interleaved in one run,
for etcdq and optionally Debian's etcd 3.4 with the same flags.

    /usr/bin/python3 bench/peer_tls.py --bin etcdq=build/etcdq [--bin etcd=/usr/bin/etcd] [--rounds 3]

Each round and binary: a fresh plain cluster, then a fresh TLS one
(cluster_side_by_side.py's Cluster: loopback, free ports, --heartbeat-interval
100 --election-timeout 1000 --snapshot-count 100000; client URLs plain in
both), each running etcd's `benchmark --conns 100 --clients 1000 put
--key-size 8 --val-size 256 --total 30000` over the three endpoints.
Prints each run, then median, min and max: req/s, p99 ms, and the members'
CPU time (user+system, all three summed, from /proc) per put, in µs, which
the other load on a shared machine disturbs less than the rates.
Certificates: tests/integration/tlslib.py's (EC P-256, one CA).
"""
import argparse, os, statistics, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import cluster_side_by_side as csb  # noqa: E402
import side_by_side as sbs  # noqa: E402
import tlslib  # noqa: E402

PUT = ["--conns", "100", "--clients", "1000", "put", "--key-size", "8", "--val-size", "256", "--total", "30000"]


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(label, binary, tool, root, pki):
    c = csb.Cluster(label, binary, root, 100, 1000, 100000)
    c.pre_vote = True
    if pki is not None:
        for m in c.members:
            m.peer_url = m.peer_url.replace("http://", "https://")
        c.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in c.members)
        c.extra_args = ["--peer-cert-file", pki.server, "--peer-key-file", pki.server_key,
                        "--peer-trusted-ca-file", pki.ca, "--peer-client-cert-auth"]
    try:
        c.start()
        cpu0 = sum(cpu_s(m.proc.pid) for m in c.members)
        r = sbs.parse_benchmark(sbs.benchmark_output(tool, c.endpoints, PUT))
        cpu = sum(cpu_s(m.proc.pid) for m in c.members) - cpu0
        c.check_alive("after the run")
        if r["errors"]:
            print(f"  {label}: errors {r['errors']}", flush=True)
        return {"put/s": r["rps"], "p99 ms": r.get("p99", 0) * 1000, "cpu us/put": cpu * 1e6 / 30000}
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
    pki = tlslib.Pki()
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="peer-tls-", dir=root) as tmp:
            for rnd in range(a.rounds):
                for label, binary in bins:
                    for peers, p in (("plain", None), ("tls", pki)):
                        key = f"{label} {peers} peers"
                        r = one_run(f"{label}-{peers}", binary, tool, tmp, p)
                        results.setdefault(key, []).append(r)
                        print(f"round {rnd + 1} {key:22} " + "  ".join(f"{k} {v:9.1f}" for k, v in r.items()),
                              flush=True)
    finally:
        pki.cleanup()
    print()
    print("| cluster | metric | median | min | max |")
    print("| --- | --- | ---: | ---: | ---: |")
    for key, runs in results.items():
        for k in runs[0]:
            vs = [r[k] for r in runs]
            print(f"| {key} | {k} | {statistics.median(vs):.1f} | {min(vs):.1f} | {max(vs):.1f} |")


if __name__ == "__main__":
    main()
