#!/usr/bin/python3
"""Watch fan-out, etcd 3.4 and etcdq side by side: for each round, starts a
fresh single-member etcd and then a fresh etcdq (A B A B ...) on loopback,
runs etcdq_watch_bench against each with the same arguments, and optionally
etcd's own `benchmark watch-latency`, then stops the server.

    bench/watch_side_by_side.py [--rounds 2] [--etcdq build/etcdq]
        [--bench build/bench/etcdq_watch_bench] [--json-dir DIR]
        [--watch-latency "--put-rate 100 --total 2000"] -- [etcdq_watch_bench args]

Prints each run's table as it goes and a summary table at the end.
"""
import argparse, json, os, re, shlex, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
sys.path.insert(0, HERE)
from side_by_side import Server  # noqa: E402  (fresh member on free loopback ports)


def run_fanout(bench, url, args, json_path, label):
    cmd = [bench, "--endpoints", url.replace("http://", ""), "--json", json_path, "--label", label] + args
    print("$", " ".join(shlex.quote(c) for c in cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    print(r.stdout + r.stderr, flush=True)
    with open(json_path) as f:
        res = json.load(f)
    res["exit_code"] = r.returncode
    return res


def run_watch_latency(tool, url, args):
    cmd = [tool, "--endpoints", url.replace("http://", "")] + args
    print("$", " ".join(shlex.quote(c) for c in cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout
    summary = out[out.find("Summary"):] if "Summary" in out else out[-1500:]
    print(summary, flush=True)
    get = lambda pat: float(m.group(1)) if (m := re.search(pat, out)) else float("nan")
    return {"avg_ms": get(r"Average:\s+([\d.]+)") * 1000, "p50_ms": get(r"50% in ([\d.]+) secs") * 1000,
            "p99_ms": get(r"99% in ([\d.]+) secs") * 1000, "slowest_ms": get(r"Slowest:\s+([\d.]+)") * 1000}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "etcdq_watch_bench"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json-dir", default=None)
    ap.add_argument("--watch-latency", default=None,
                    help="also run `benchmark watch-latency` with these arguments, e.g. '--put-rate 100 --total 2000'")
    ap.add_argument("--no-fanout", action="store_true")
    ap.add_argument("args", nargs="*", help="arguments for etcdq_watch_bench (after --)")
    a = ap.parse_args()
    json_dir = a.json_dir or tempfile.mkdtemp(prefix="watch-fanout-")
    os.makedirs(json_dir, exist_ok=True)
    tool = None
    if a.watch_latency:
        tool = subprocess.run(["bash", os.path.join(SHARED, "tools", "etcd-benchmark.sh")],
                              capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    rows = []
    for rnd in range(a.rounds):
        for name, binary in [("etcd", a.etcd), ("etcdq", a.etcdq)]:
            srv = Server(binary, name)
            try:
                row = {"server": name, "round": rnd + 1}
                if not a.no_fanout:
                    row["fanout"] = run_fanout(a.bench, srv.url, a.args,
                                               os.path.join(json_dir, f"{name}-{rnd + 1}.json"), f"{name} round {rnd + 1}")
                if tool:
                    row["watch_latency"] = run_watch_latency(tool, srv.url, shlex.split(a.watch_latency))
                row["rss_kib"] = srv.rss_kib()
                rows.append(row)
            finally:
                srv.stop()
    print("| server | round | puts/s | events/s (run) | events/s (peak 1 s) | commit→delivery p50 / p90 / p99 / max ms"
          " | starved | violations | exit | watch-latency p50 / p99 ms | peak RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f = r.get("fanout")
        wl = r.get("watch_latency")
        cells = [r["server"], str(r["round"])]
        if f:
            d = f["commit_delay_ms"]
            cells += [f"{f['puts_per_s']:.0f}", f"{f['events_per_s']:.0f}", str(f["events_per_s_peak_second"]),
                      f"{d['p50']:.1f} / {d['p90']:.1f} / {d['p99']:.1f} / {d['max']:.1f}",
                      str(f["watchers_starved"]), str(f["violations"]["total"]), str(f["exit_code"])]
        else:
            cells += ["-"] * 7
        cells.append(f"{wl['p50_ms']:.2f} / {wl['p99_ms']:.2f}" if wl else "-")
        cells.append(f"{r['rss_kib'] / 1024:.0f}")
        print("| " + " | ".join(cells) + " |")
    print(f"JSON: {json_dir}")


if __name__ == "__main__":
    main()
