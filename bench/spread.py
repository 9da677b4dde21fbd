#!/usr/bin/python3
"""The spread between compare.py runs: for each workload, each run's median
req/s for both servers and their ratio, then min-max and the ratio's spread.

    /usr/bin/python3 bench/spread.py bench/results/compare-quick-*.json [--markdown]
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


def main():
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = [medians(p) for p in paths]
    keys = []
    for _, m in runs:
        keys += [k for k in m if k not in keys]
    tools = {"tool": "etcd benchmark", "ours": "etcdq_loadgen", "watch": "etcdq_watch_bench"}
    print("Load average (1 min) before each run: " +
          ", ".join(f"{j['load_before'][0]:.1f}" for j, _ in runs) + "; fdatasync: " +
          "; ".join(j["disk"].split("; ")[-1].rstrip(")") for j, _ in runs) + "\n")
    print("| members | tool | workload | " + " | ".join(f"run {i + 1} etcd / etcdq req/s (ratio)" for i in range(len(runs)))
          + " | etcd spread | etcdq spread | ratio min–max |")
    print("| ---: | --- | --- |" + " ---: |" * (len(runs) + 3))
    for k in keys:
        cells, e, q, ratios = [], [], [], []
        for _, m in runs:
            v = m.get(k, {})
            if "etcd" in v and "etcdq" in v:
                r = v["etcdq"]["rps"] / v["etcd"]["rps"]
                cells.append(f"{v['etcd']['rps']:.0f} / {v['etcdq']['rps']:.0f} ({r:.2f})")
                e.append(v["etcd"]["rps"])
                q.append(v["etcdq"]["rps"])
                ratios.append(r)
            else:
                cells.append("-")
        if not ratios:
            continue
        spread = lambda xs: f"±{(max(xs) - min(xs)) / 2 / statistics.mean(xs) * 100:.0f} %"  # noqa: E731
        print(f"| {k[0]} | {tools[k[1]]} | {k[2]} | " + " | ".join(cells) +
              f" | {spread(e)} | {spread(q)} | {min(ratios):.2f}–{max(ratios):.2f} |")


if __name__ == "__main__":
    main()
