#!/usr/bin/python3
"""CPU a put costs a 3-member cluster: etcd's `benchmark put` over the three client
endpoints, and the user+system CPU seconds of the three member processes (from
/proc/<pid>/stat, before and after the run) divided by the puts.

    /usr/bin/python3 bench/cluster_put_cpu.py [--rounds 2] [--total 100000] \
        NAME=BINARY [NAME=BINARY ...]

Each round starts a fresh cluster of each binary in turn (A B A B ...), with
cluster_side_by_side.py's members and flags, runs
`benchmark --conns 100 --clients 1000 put --key-size 8 --val-size 256
--sequential-keys --total N`, and prints req/s, p99 and µs of member CPU per put,
and the load generator's own CPU per put (it shares the cores: with the
members' it bounds the req/s a 2-core machine can show).
The load generator runs on the same cores: req/s moves with whatever else the
machine is doing; the CPU per put much less.
"""
import argparse, os, resource, shutil, signal, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cluster_side_by_side as csb  # noqa: E402
import side_by_side as sbs  # noqa: E402


def cpu_seconds(pid):
    """utime + stime of `pid` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("servers", nargs="+", help="NAME=BINARY")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--total", type=int, default=100000)
    ap.add_argument("--perf", metavar="DIR", help="also `perf record` the members of each run into DIR")
    ap.add_argument("--perf-args", default="-F 1999 -g", help="perf record's sampling flags (default: %(default)s)")
    a = ap.parse_args()
    servers = [s.split("=", 1) for s in a.servers]
    root = os.environ.get("BENCH_DIR", "/var/tmp")
    run_dir = tempfile.mkdtemp(prefix="cluster-put-cpu-", dir=root)
    tool = sbs.benchmark_tool()
    args = ["--conns", "100", "--clients", "1000", "put", "--key-size", "8", "--val-size", "256",
            "--sequential-keys", "--total", str(a.total)]
    res = {name: [] for name, _ in servers}
    try:
        for rnd in range(a.rounds):
            for name, binary in servers:
                copy = os.path.join(run_dir, f"{name}-bin")
                if not os.path.exists(copy):
                    shutil.copy2(binary, copy)
                c = csb.Cluster(name, copy, run_dir, 100, 1000, 100000)
                c.pre_vote = True
                try:
                    c.start()
                    pids = [m.proc.pid for m in c.members]
                    perf = None
                    if a.perf:
                        os.makedirs(a.perf, exist_ok=True)
                        perf = subprocess.Popen(["perf", "record"] + a.perf_args.split() + ["-o",
                                                 os.path.join(a.perf, f"{name}-{rnd + 1}.data"),
                                                 "-p", ",".join(map(str, pids))],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    before = sum(cpu_seconds(p) for p in pids)
                    # The load generator is the only child waited for in between:
                    # its CPU is the rusage of waited children that this run adds.
                    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    r = sbs.parse_benchmark(sbs.benchmark_output(tool, c.endpoints, args, timeout=900))
                    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    after = sum(cpu_seconds(p) for p in pids)
                    client_us = ((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)) / a.total * 1e6
                    if perf:
                        perf.send_signal(signal.SIGINT)
                        perf.wait()
                    c.check_alive("during the benchmark")
                    us = (after - before) / a.total * 1e6
                    res[name].append((r["rps"], r["p99"] * 1000, us, client_us))
                    print(f"round {rnd + 1} {name:10} {r['rps']:9.0f} req/s  p99 {r['p99'] * 1000:7.1f} ms  "
                          f"{us:6.1f} us CPU/put (3 members)  {client_us:5.1f} us (client)  "
                          f"errors {r['errors'] or 0}", flush=True)
                finally:
                    c.stop()
                    c.remove()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    print("\n| server | req/s (median) | p99 ms (median) | µs CPU a put, 3 members (median) | "
          "µs CPU a put, etcd's benchmark client (median) | runs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, _ in servers:
        rs = res[name]
        if rs:
            print(f"| {name} | {statistics.median(x[0] for x in rs):.0f} | {statistics.median(x[1] for x in rs):.1f} "
                  f"| {statistics.median(x[2] for x in rs):.1f} | {statistics.median(x[3] for x in rs):.1f} | {len(rs)} |")


if __name__ == "__main__":
    main()
