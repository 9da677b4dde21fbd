#!/usr/bin/python3
"""The spread between compare.py runs: for each workload, each run's median
req/s for both servers and their ratio, then min-max and the ratio's spread;
then one table of medians over every round of every run given.

    /usr/bin/python3 bench/spread.py bench/results/compare-quick-*.json
"""
import json, statistics, sys


def medians(path):
    with open(path) as f:
        j = json.load(f)
    out = {}
    for r in j["results"]:
        key = (r["members"], r["kind"], r["workload"])
        out.setdefault(key, {})[r["server"]] = {
            k: statistics.median(x[k] for x in r["runs"]) for k in ("rps", "p99")}
    return j, out


def pooled(paths):
    """{(members, kind, workload): {server: [run dicts of every round]}}"""
    out = {}
    for p in paths:
        with open(p) as f:
            for r in json.load(f)["results"]:
                out.setdefault((r["members"], r["kind"], r["workload"]), {}).setdefault(r["server"], []).extend(r["runs"])
    return out


LABELS = {"etcd": "etcd 3.4", "etcd36": "etcd 3.6"}


def main():
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = [medians(p) for p in paths]
    keys = []
    for _, m in runs:
        keys += [k for k in m if k not in keys]
    refs = [r for r in ("etcd", "etcd36") if any(r in v for _, m in runs for v in m.values())]
    tools = {"tool": "etcd benchmark", "ours": "etcdq_loadgen", "watch": "etcdq_watch_bench"}
    print("Load average (1 min) before each run: " +
          ", ".join(f"{j['load_before'][0]:.1f}" for j, _ in runs) + "; fdatasync: " +
          "; ".join(j["disk"].split("; ")[-1].rstrip(")") for j, _ in runs) + "\n")
    pool = pooled(paths)
    for ref in refs:
        label = LABELS[ref]
        print(f"etcdq against {label}, run by run:\n")
        print("| members | tool | workload | " +
              " | ".join(f"run {i + 1} {label} / etcdq req/s (ratio)" for i in range(len(runs))) +
              f" | {label} spread | etcdq spread | ratio min–max |")
        print("| ---: | --- | --- |" + " ---: |" * (len(runs) + 3))
        for k in keys:
            cells, e, q, ratios = [], [], [], []
            for _, m in runs:
                v = m.get(k, {})
                if ref in v and "etcdq" in v:
                    r = v["etcdq"]["rps"] / v[ref]["rps"]
                    cells.append(f"{v[ref]['rps']:.0f} / {v['etcdq']['rps']:.0f} ({r:.2f})")
                    e.append(v[ref]["rps"])
                    q.append(v["etcdq"]["rps"])
                    ratios.append(r)
                else:
                    cells.append("-")
            if not ratios:
                continue
            spread = lambda xs: f"±{(max(xs) - min(xs)) / 2 / statistics.mean(xs) * 100:.0f} %"  # noqa: E731
            print(f"| {k[0]} | {tools[k[1]]} | {k[2]} | " + " | ".join(cells) +
                  f" | {spread(e)} | {spread(q)} | {min(ratios):.2f}–{max(ratios):.2f} |")

        n = min(len(v) for d in pool.values() for s, v in d.items() if s in (ref, "etcdq"))
        print(f"\nMedians over every round of the {len(paths)} runs ({n} or more rounds per server), etcdq against "
              f"{label}:\n")
        print(f"| members | tool | workload | {label} req/s | etcdq req/s | ratio | {label} p50 ms | etcdq p50 ms "
              f"| {label} p99 ms | etcdq p99 ms | p99 ratio |")
        print("| ---: | --- | --- |" + " ---: |" * 8)
        for k in keys:
            d = pool.get(k, {})
            if ref not in d or "etcdq" not in d:
                continue
            m = {s: {f: statistics.median(r[f] for r in d[s]) for f in ("rps", "p50", "p99")} for s in (ref, "etcdq")}
            e, q = m[ref], m["etcdq"]
            print(f"| {k[0]} | {tools[k[1]]} | {k[2]} | {e['rps']:.0f} | {q['rps']:.0f} | {q['rps'] / e['rps']:.2f} | "
                  f"{e['p50']:.2f} | {q['p50']:.2f} | {e['p99']:.2f} | {q['p99']:.2f} | "
                  f"{q['p99'] / e['p99'] if e['p99'] else float('nan'):.2f} |")
        print()
    for k in keys:
        d = pool.get(k, {})
        if "probe" in d and "etcdq" in d:
            c = statistics.median(r["rps"] for r in d["probe"])
            v = statistics.median(r["rps"] for r in d["etcdq"])
            print(f"gRPC-only probe's ceiling, {k[2]} ({k[0]} member): {c:.0f} req/s; etcdq {v:.0f} is {v / c:.0%} of it.")


if __name__ == "__main__":
    main()
