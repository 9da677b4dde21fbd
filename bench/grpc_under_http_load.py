#!/usr/bin/python3
"""gRPC throughput on a client port with and without an HTTP/1.1 load on the
same port (issue #14: the HTTP side must not slow gRPC), against a fresh
single member of Debian's etcd 3.4 and of etcdq, alternating, in one run.

    /usr/bin/python3 bench/grpc_under_http_load.py [--etcdq build/etcdq] [--rounds 2] [--http-rate N] [--out bench/RESULTS.md]

Each run: etcd's `benchmark put` (1000 clients over 100 connections, 20000
puts of 256 B to 1000 keys) alone, then the same while wrk (-t1 -c100,
keep-alive) sends POST /v3/kv/range through the JSON gateway to the same
port for as long as the puts take. Reports the puts' req/s and p99 both ways
and the HTTP req/s during the mixed run. With --http-rate N each wrk
connection waits 100/N s between requests (wrk's delay()), so the HTTP load
is at most N req/s whichever server answers: the cost of the same HTTP work.
"""
import argparse, datetime, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import side_by_side as sbs  # noqa: E402
import gateway_side_by_side as gw  # noqa: E402

PUT = ["--conns", "100", "--clients", "1000", "put", "--total", "20000", "--key-size", "8",
       "--val-size", "256", "--key-space-size", "1000"]


def one(tool, binary, script_dir, script="range.lua"):
    m = harness.Member(binary=binary)
    try:
        endpoint = m.client_url.replace("http://", "")
        alone = sbs.parse_benchmark(sbs.benchmark_output(tool, endpoint, PUT))
        # wrk runs until killed: about as long as the mixed put run.
        wrk = subprocess.Popen(["wrk", "-t1", "-c100", "-d120s", "--latency", "-s",
                                os.path.join(script_dir, script), m.client_url],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            mixed = sbs.parse_benchmark(sbs.benchmark_output(tool, endpoint, PUT))
        finally:
            wrk.send_signal(2)  # SIGINT: wrk prints its report for the time it ran
            out, _ = wrk.communicate(timeout=30)
        http = gw.parse(out)
        return {"alone_rps": alone["rps"], "alone_p99": alone["p99"] * 1000,
                "mixed_rps": mixed["rps"], "mixed_p99": mixed["p99"] * 1000,
                "http_rps": http["rps"], "http_errors": http["errors"],
                "grpc_errors": sum(alone["errors"].values()) + sum(mixed["errors"].values())}
    finally:
        m.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--http-rate", type=int, default=0, help="cap the HTTP load at this many req/s (0: none)")
    ap.add_argument("--out")
    a = ap.parse_args()
    tool = sbs.benchmark_tool()
    servers = [("etcd 3.4", "/usr/bin/etcd"), ("etcdq", a.etcdq)]
    results = {}
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "range.lua"), "w") as f:
            f.write(gw.lua("range"))
            if a.http_rate:  # 100 connections, each waiting between its requests
                f.write("\ndelay = function() return %d end\n" % max(1, 100 * 1000 // a.http_rate))
        for rnd in range(a.rounds):
            for name, binary in servers:
                r = one(tool, binary, d)
                print("round %d %-8s %s" % (rnd + 1, name, r), flush=True)
                results.setdefault(name, []).append(r)
    lines = ["", "## gRPC puts with and without HTTP load on the same client port, etcd 3.4.23 against etcdq (%s)" %
             datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "",
             "`/usr/bin/python3 bench/grpc_under_http_load.py --rounds %d%s`: etcd's benchmark put, 1000 clients "
             "over 100 connections, 20000 puts of 256 B; then again while wrk -t1 -c100 sends gateway "
             "POST /v3/kv/range to the same port%s. A fresh single member each run, medians of %d rounds. "
             "2-core machine: the load generators share the server's cores." %
             (a.rounds, " --http-rate %d" % a.http_rate if a.http_rate else "",
              ", at most %d req/s" % a.http_rate if a.http_rate else "", a.rounds), "",
             "| server | puts alone req/s | p99 ms | puts under HTTP load req/s | p99 ms | ratio | HTTP ranges req/s meanwhile | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, rs in results.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        lines.append("| %s | %.0f | %.1f | %.0f | %.1f | %.2f | %.0f | %d |" % (
            name, med("alone_rps"), med("alone_p99"), med("mixed_rps"), med("mixed_p99"),
            med("mixed_rps") / med("alone_rps"), med("http_rps"), med("grpc_errors") + med("http_errors")))
    gw.emit(lines, a.out)


if __name__ == "__main__":
    main()
