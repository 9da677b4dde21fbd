#!/usr/bin/python3
"""One command: etcdq against Debian's etcd 3.4 and etcd 3.6, side by side, with
etcd's own load generator and with ours (etcdq_loadgen, etcdq_watch_bench).

    /usr/bin/python3 bench/compare.py [--quick | --full | --scale] [--out bench/RESULTS.md]
        [--etcd /usr/bin/etcd] [--etcd36 PATH|none] [--no-probe]

The references: --etcd (Debian's 3.4, "etcd" in the results) and --etcd36
(the etcd 3.6 that scripts/setup.sh builds from the module proxy into
~/.cache/etcdq/etcd-v3.6.*/, found there by default; "etcd36"); each gets its
own table against etcdq. The puts of the 1-member rows also run against
bench/grpc_api_probe (a std::map behind gRPC's callback API, no disk: the
ceiling gRPC leaves on this machine; "probe"), so each run says what
fraction of it etcdq reaches (--no-probe: not).

1. Builds etcdq and the bench tools (scripts/build.sh) and etcd's `benchmark`
   (../shared/tools/etcd-benchmark.sh); copies build/etcdq, so a rebuild
   meanwhile does not change what is measured.
2. Each round (--rounds, A B A B): a fresh 1-member etcd of each reference, a
   fresh 1-member etcdq, then the same with 3 members, all with the same
   flags (bench/cluster_side_by_side.py's Cluster: loopback, free ports, data
   dirs in $BENCH_DIR or /var/tmp, heartbeat 100 ms, election timeout 1 s,
   snapshot count 100000, pre-vote on), each running every workload below
   and its peak RSS (VmHWM, summed over members) read at the end.
3. Memory: a fresh member of each server loads --memory-keys keys of 256 B;
   its RSS and data-dir size on disk are read.
4. Scale (--full, --scale): one member of each server grows through
   --scale-steps keys of 256 B; put and range latency at 1 and 1000 clients
   at each step.
5. Prints a table (medians over rounds: req/s, p50, p99, ratio etcdq/etcd),
   plots throughput and p99 against client count (bench/results/*.png,
   matplotlib; installed with apt-get if missing), writes every run to
   bench/results/*.json, and with --out appends the table under
   "## One command: bench/compare.py".

The quick profile (the default) takes about 8 minutes on 2 cores.
"""
import argparse, datetime, json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import side_by_side as sbs  # noqa: E402
import cluster_side_by_side as css  # noqa: E402

SECTION = "## One command: bench/compare.py"
INTRO = """`/usr/bin/python3 bench/compare.py` (see bench/README.md): fresh 1- and 3-member etcd 3.4 (and, since
2026-12-07, etcd 3.6) and etcdq servers with the same flags on loopback, A B A B; etcd's `benchmark` and our `etcdq_loadgen` /
`etcdq_watch_bench` run the same workloads against both; medians over rounds. The machine has 2 cores
shared by the servers, the load generator and another developer's builds and tests.
"""

PROFILES = {
    # seconds per loadgen run, requests per etcd-tool run, client counts for the plot
    "quick": dict(rounds=2, seconds=2, tool_total=20000, sweep=[1, 10, 100, 1000], sweep_seconds=1.5,
                  watch_seconds=3, memory_keys=1_000_000, scale_steps=[]),
    "full": dict(rounds=3, seconds=10, tool_total=200000, sweep=[1, 3, 10, 30, 100, 300, 1000], sweep_seconds=5,
                 watch_seconds=10, memory_keys=1_000_000, scale_steps=[1_000_000, 5_000_000, 10_000_000]),
    "scale": dict(rounds=0, seconds=3, tool_total=0, sweep=[], sweep_seconds=0, watch_seconds=0, memory_keys=0,
                  scale_steps=[1_000_000, 5_000_000, 10_000_000]),
    # issue #13: put and range with client TLS, auth, both; peer TLS on 3 members
    "secure": dict(rounds=2, seconds=2, tool_total=20000, sweep=[], sweep_seconds=0, watch_seconds=0,
                   memory_keys=0, scale_steps=[], secure=True),
}


def tool_args(clients, conns, sub, total):
    return ["--conns", str(conns), "--clients", str(clients)] + sub + ["--total", str(total)]


def workloads_1(p):
    """(name, kind, args) run against every 1-member server, in this order."""
    t = p["tool_total"]
    kv = ["--key-size", "8", "--val-size", "256"]
    return [
        ("put 1 client", "tool", tool_args(1, 1, ["put"] + kv + ["--sequential-keys"], 2000)),
        ("put 1000 clients", "tool", tool_args(1000, 100, ["put"] + kv + ["--sequential-keys"], t)),
        ("range l 1000 clients", "tool", tool_args(1000, 100, ["range", "foo", "--consistency", "l"], t)),
        ("range s 1000 clients", "tool", tool_args(1000, 100, ["range", "foo", "--consistency", "s"], t)),
        ("txn-put 1000 clients", "tool",
         tool_args(1000, 100, ["txn-put"] + kv + ["--key-space-size", "100000"], t)),
        ("lease-keepalive 1000 clients", "tool", tool_args(1000, 100, ["lease-keepalive"], t)),
        ("put 1 client", "ours", ["--conns", "1", "--clients", "1", "--workload", "put", "--sequential-keys"]),
        ("put 1000 clients", "ours", ["--workload", "put"]),
        ("range l 1000 clients", "ours", ["--workload", "range"]),
        ("range s 1000 clients", "ours", ["--workload", "range", "--consistency", "s"]),
        ("range prefix limit 100 of 1000 keys, l, 1000 clients", "ours",
         ["--workload", "range", "--range-mode", "prefix", "--limit", "100"]),
        ("txn-put 1000 clients", "ours", ["--workload", "txn-put"]),
        ("delete 1000 clients", "ours", ["--workload", "delete", "--preload", "40000"]),
        ("lease-keepalive 1000 clients", "ours", ["--workload", "lease-keepalive", "--leases", "1000"]),
        ("k8s mix 100 clients, 4 watchers", "ours", ["--workload", "k8s", "--conns", "10", "--clients", "100"]),
        ("watch fan-out 10000 watchers", "watch", ["--rate", "0", "--concurrency", "64"]),
        ("watch fan-out 10000 watchers, 1000 puts/s", "watch", ["--rate", "1000"]),
        # kube-apiserver's watch cache: one stream, a prefix watcher a resource (prev_kv), 100 Txn writers.
        ("watch k8s shape: 1 stream, 20 prefix watchers, 100 writers", "watch", ["--shape", "k8s"]),
    ]


def workloads_3(p):
    t = p["tool_total"]
    kv = ["--key-size", "8", "--val-size", "256"]
    return [
        ("put 1000 clients", "tool", tool_args(1000, 100, ["put"] + kv + ["--sequential-keys"], t)),
        ("range l 1000 clients", "tool", tool_args(1000, 100, ["range", "foo", "--consistency", "l"], t)),
        ("put 1000 clients", "ours", ["--workload", "put"]),
        ("txn-put 1000 clients", "ours", ["--workload", "txn-put"]),
        ("k8s mix 100 clients, 4 watchers", "ours", ["--workload", "k8s", "--conns", "12", "--clients", "100"]),
    ]


def configs(p, pki):
    """The servers each round starts: {members, tag (appended to the workload's name), tls, peer_tls
    (a tlslib.Pki or None), auth (simple token; user "bench" with READWRITE over every key), wls}."""
    if not p.get("secure"):
        return [dict(members=1, tag="", tls=None, peer_tls=None, auth=False, wls=workloads_1(p)),
                dict(members=3, tag="", tls=None, peer_tls=None, auth=False, wls=workloads_3(p))]
    t = p["tool_total"]
    kv = ["--key-size", "8", "--val-size", "256"]
    put = ("put 1000 clients", "tool", tool_args(1000, 100, ["put"] + kv + ["--sequential-keys"], t))
    rng = ("range l 1000 clients", "tool", tool_args(1000, 100, ["range", "foo", "--consistency", "l"], t))
    out = [dict(members=1, tag=tag, tls=tls, peer_tls=None, auth=auth, wls=[put, rng])
           for tag, tls, auth in (("plain", None, False), ("client TLS", pki, False), ("auth", None, True),
                                  ("client TLS + auth", pki, True))]
    out += [dict(members=3, tag=tag, tls=None, peer_tls=ptls, auth=False, wls=[put])
            for tag, ptls in (("plain", None), ("peer TLS", pki))]
    return out


def enable_auth(c):
    """root, and user "bench" (password "pw") with READWRITE over every key; then AuthEnable."""
    from auth_put import enable_auth as enable  # noqa: E402 (grpc stubs; only the secure profile needs them)
    with c.channel(c.members[0].endpoint) as ch:
        enable(ch)


class Runner:
    """Runs one workload against one server and returns {rps, p50, p99 (ms), errors, ...}."""

    def __init__(self, tool, loadgen, watch_bench, workdir):
        self.tool, self.loadgen, self.watch_bench, self.workdir = tool, loadgen, watch_bench, workdir

    def run(self, kind, endpoints, args, seconds):
        if kind == "tool":
            r = sbs.parse_benchmark(sbs.benchmark_output(self.tool, endpoints, args, timeout=900))
            return {"rps": r["rps"], "p50": r["p50"] * 1000, "p99": r["p99"] * 1000,
                    "errors": sum(r["errors"].values()), "error_text": str(r["errors"]) if r["errors"] else ""}
        out = os.path.join(self.workdir, "run.json")
        if os.path.exists(out):
            os.remove(out)
        if kind == "ours":
            cmd = [self.loadgen, "--endpoints", endpoints, "--seconds", str(seconds), "--no-progress",
                   "--json", out] + args
        else:
            cmd = [self.watch_bench, "--endpoints", endpoints, "--seconds", str(seconds), "--json", out] + args
        with tempfile.TemporaryFile(mode="w+") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=600).returncode
            f.seek(0)
            text = f.read()
        if not os.path.exists(out):
            return {"rps": float("nan"), "p50": float("nan"), "p99": float("nan"), "errors": 1,
                    "error_text": f"exit {rc}: {text[-300:]}"}
        with open(out) as f:
            j = json.load(f)
        if kind == "watch":
            bad = 0 if j["ok"] else 1
            per_resp = j["events_delivered"] / j["watch_responses"] if j["watch_responses"] else 0.0
            return {"rps": j["events_per_s"], "p50": j["commit_delay_ms"]["p50"], "p99": j["commit_delay_ms"]["p99"],
                    "puts_per_s": j["puts_per_s"], "events_per_response": per_resp, "errors": bad,
                    "error_text": "" if j["ok"] else text[-300:]}
        w = j["workloads"][0]
        errs = w["errors"] + w["violations"] + (1 if w["setup_error"] else 0)
        return {"rps": w["requests_per_s"], "p50": w["all_ops"]["p50_ms"], "p99": w["all_ops"]["p99_ms"],
                "p999": w["all_ops"]["p999_ms"], "errors": errs, "checks": w["checks"],
                "error_text": (w["setup_error"] + " " + json.dumps(w["error_counts"]))[:300] if errs else ""}


REF_LABELS = {"etcd": "etcd 3.4", "etcd36": "etcd 3.6"}


def find_etcd36(given):
    """--etcd36's binary: the path given, none, or the newest etcd 3.6 scripts/setup.sh cached."""
    if given == "none":
        return None
    if given:
        return given
    import glob
    found = sorted(glob.glob(os.path.expanduser("~/.cache/etcdq/etcd-v3.6.*/etcd")))
    if not found:
        print("no etcd 3.6 under ~/.cache/etcdq (bash scripts/setup.sh builds it): compared with etcd 3.4 only",
              flush=True)
        return None
    return found[-1]


def run_probe(probe_bin, runner, kind, args, seconds):
    """One workload against a fresh bench/grpc_api_probe (callback API, no disk) on a free port."""
    port = sbs.free_port()
    proc = subprocess.Popen([probe_bin, "--listen", f"127.0.0.1:{port}", "--api", "callback"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        return runner.run(kind, f"127.0.0.1:{port}", args, seconds)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start(label, binary, root, size, extra=(), tls=None, peer_tls=None):
    c = css.Cluster(label, binary, root, 100, 1000, 100000, size=size, tls=tls, peer_tls=peer_tls)
    c.pre_vote = True
    c.extra_args = list(extra)
    try:
        c.start()
    except BaseException:
        c.stop()
        c.remove()
        raise
    return c


def finish(c):
    c.stop()
    c.remove()
    os.sync()
    time.sleep(2)  # let the disk settle before the next server starts


def dir_bytes(path):
    """Bytes allocated on disk under path (du)."""
    out = subprocess.run(["du", "-s", "--block-size=1", path], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else 0


def current_rss_kib(pid):
    return sbs.proc_status_kib(pid, "VmRSS")


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        pass
    print("installing python3-matplotlib with apt-get (for the plot)", flush=True)
    sudo = [] if os.getuid() == 0 else ["sudo"]
    r = subprocess.run(sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "python3-matplotlib"],
                       capture_output=True, text=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if r.returncode != 0:
        print("apt-get install python3-matplotlib failed; no plot:\n" + r.stderr[-500:])
        return False
    return True


def plot(sweep, path, title):
    """sweep: {(server, workload): {clients: (rps, p99_ms)}} -> PNG at path."""
    if not ensure_matplotlib():
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {"etcd": "--", "etcd36": ":", "etcdq": "-"}
    colors = {}
    for (server, wl), pts in sorted(sweep.items()):
        xs = sorted(pts)
        color = colors.setdefault(wl, f"C{len(colors)}")
        for ax, i in ((a1, 0), (a2, 1)):
            ax.plot(xs, [pts[x][i] for x in xs], styles[server], color=color, marker="o", label=f"{server} {wl}")
    for a, yl in ((a1, "requests/s"), (a2, "p99 latency, ms")):
        a.set_xscale("log")
        a.set_xlabel("clients (requests in flight)")
        a.set_ylabel(yl)
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    a2.set_yscale("log")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_const", dest="profile", const="quick", help="the default")
    g.add_argument("--full", action="store_const", dest="profile", const="full")
    g.add_argument("--scale", action="store_const", dest="profile", const="scale", help="growth only")
    g.add_argument("--secure", action="store_const", dest="profile", const="secure",
                   help="put and range with client TLS, auth, both; 3-member put with peer TLS")
    ap.add_argument("--rounds", type=int, help="override the profile's rounds")
    ap.add_argument("--memory-keys", type=int, help="override the profile's key count for the memory step")
    ap.add_argument("--scale-steps", help="comma list of key counts, e.g. 1000000,5000000")
    ap.add_argument("--seconds", type=float, help="override: seconds per loadgen run (development)")
    ap.add_argument("--tool-total", type=int, help="override: requests per etcd-tool run (development)")
    ap.add_argument("--etcd", default="/usr/bin/etcd", help="etcd 3.4 (Debian's)")
    ap.add_argument("--etcd36", default="", help="etcd 3.6's binary (default: ~/.cache/etcdq/etcd-v3.6.*/etcd); "
                                                  "none: leave it out")
    ap.add_argument("--no-probe", action="store_true", help="do not measure bench/grpc_api_probe's ceiling")
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--no-build", action="store_true", help="use the binaries in build/ as they are")
    ap.add_argument("--out", help="append the table to this markdown file (e.g. bench/RESULTS.md)")
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--only", help="run only the workloads whose name matches this regular expression "
                    "(e.g. 'watch'); no sweep, memory or growth step")
    a = ap.parse_args()
    etcd36 = find_etcd36(a.etcd36)
    p = dict(PROFILES[a.profile or "quick"])
    profile = a.profile or "quick"
    if a.rounds is not None:
        p["rounds"] = a.rounds
    if a.memory_keys is not None:
        p["memory_keys"] = a.memory_keys
    if a.seconds is not None:
        p["seconds"] = p["sweep_seconds"] = p["watch_seconds"] = a.seconds
    if a.tool_total is not None:
        p["tool_total"] = a.tool_total
    if a.scale_steps:
        p["scale_steps"] = [int(x) for x in a.scale_steps.split(",")]
    if a.only:
        p["sweep"], p["memory_keys"], p["scale_steps"] = [], 0, []
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: sys.exit(128 + s))

    t0 = time.monotonic()
    load_before = os.getloadavg()
    if not a.no_build:
        subprocess.run(["nice", "bash", os.path.join(ROOT, "scripts", "build.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    tool = sbs.benchmark_tool()
    root = os.environ.get("BENCH_DIR", "/var/tmp")
    run_dir = tempfile.mkdtemp(prefix="compare-", dir=root)
    etcdq = os.path.join(run_dir, "etcdq")
    shutil.copy2(a.etcdq, etcdq)
    bench_bin = os.path.join(os.path.dirname(a.etcdq), "bench")
    runner = Runner(tool, os.path.join(bench_bin, "etcdq_loadgen"), os.path.join(bench_bin, "etcdq_watch_bench"),
                    run_dir)
    commit = css.commit_line()
    disk = css.disk_line(root)
    servers = [("etcd", a.etcd)] + ([("etcd36", etcd36)] if etcd36 else []) + [("etcdq", etcdq)]
    refs = [name for name, _ in servers if name != "etcdq"]
    probe_bin = None if a.no_probe or p.get("secure") else os.path.join(bench_bin, "grpc_api_probe")
    if probe_bin and not os.path.exists(probe_bin):
        print(f"no {probe_bin}: the probe's ceiling is left out", flush=True)
        probe_bin = None
    results = {}   # (members, tool/kind, workload, server) -> [run dicts]
    rss = {}       # (members, server) -> [KiB]
    sweep = {}     # (server, workload) -> {clients: [(rps, p99)]}
    odd, runs = [], []

    def log(line):
        runs.append(line)
        print(line, flush=True)

    def record(members, kind, wname, server, r, rnd):
        results.setdefault((members, kind, wname, server), []).append(r)
        extra = f"  ERRORS {r['errors']}: {r['error_text']}" if r["errors"] else ""
        if r["errors"]:
            odd.append(f"{server}, {members} member(s), {kind} {wname}: {r['errors']} errors {r['error_text']}")
        unit = "events/s" if kind == "watch" else "req/s"
        if "events_per_response" in r:
            extra = f"  {r['events_per_response']:.2f} events/response" + extra
        log(f"round {rnd} {server:5} {members}m {kind:5} {wname:48} {r['rps']:9.0f} {unit}  p50 {r['p50']:8.2f} ms"
            f"  p99 {r['p99']:8.2f} ms{extra}")

    memory, scale = {}, {}
    pki = None
    if p.get("secure"):
        sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
        import tlslib  # noqa: E402 (the tests' PKI: a CA, a server and a client certificate, openssl)
        pki = tlslib.Pki()
    try:
        for rnd in range(1, p["rounds"] + 1):
            for cfg in configs(p, pki):
                if a.only:
                    cfg = dict(cfg, wls=[w for w in cfg["wls"] if re.search(a.only, w[0])])
                    if not cfg["wls"]:
                        continue
                members = cfg["members"]
                for name, binary in servers:
                    try:
                        c = start(name, binary, run_dir, members, tls=cfg["tls"], peer_tls=cfg["peer_tls"])
                    except css.Odd as e:
                        odd.append(f"{name}, {members} member(s) {cfg['tag']}, round {rnd}: did not start: {e}")
                        log(f"ODD: {e}")
                        continue
                    try:
                        eps = c.endpoints
                        gflags = c.tool_tls_args()
                        if cfg["auth"]:
                            enable_auth(c)
                            gflags.append("--user=bench:pw")
                        for wname, kind, args in cfg["wls"]:
                            secs = p["watch_seconds"] if kind == "watch" else p["seconds"]
                            if cfg["tag"]:
                                wname = f"{wname}, {cfg['tag']}"
                            record(members, kind, wname, name, runner.run(kind, eps, gflags + args, secs), rnd)
                            c.check_alive(f"after {wname}")
                        if members == 1:
                            for wl, wargs in (("put", ["--workload", "put"]), ("range l", ["--workload", "range"])):
                                for n in p["sweep"]:
                                    r = runner.run("ours", eps, wargs + ["--clients", str(n), "--conns",
                                                                          str(min(n, 100))], p["sweep_seconds"])
                                    if r["errors"]:
                                        odd.append(f"{name} sweep {wl} {n} clients: {r['error_text']}")
                                    sweep.setdefault((name, wl), {}).setdefault(n, []).append((r["rps"], r["p99"]))
                                    log(f"round {rnd} {name:5} 1m sweep {wl:8} {n:5} clients {r['rps']:9.0f} req/s"
                                        f"  p99 {r['p99']:8.2f} ms")
                        rss.setdefault((members, name), []).append(c.rss_kib())
                        log(f"round {rnd} {name:5} {members}m peak RSS {rss[(members, name)][-1] / 1024:.0f} MiB")
                    except css.Odd as e:
                        odd.append(f"{name}, {members} member(s), round {rnd}: {e}")
                        log(f"ODD: {e}")
                    finally:
                        finish(c)
            if probe_bin:
                for wname, kind, args in workloads_1(p):
                    if kind == "tool" and wname.startswith("put") and (not a.only or re.search(a.only, wname)):
                        record(1, kind, wname, "probe", run_probe(probe_bin, runner, kind, args, p["seconds"]), rnd)

        if p["memory_keys"]:
            n = p["memory_keys"]
            for name, binary in servers:
                c = start(name, binary, run_dir, 1)
                try:
                    t = time.monotonic()
                    r = runner.run("ours", c.endpoints, ["--workload", "range", "--preload", str(n), "--conns", "100",
                                                         "--clients", "100", "--val-size", "256"], 1)
                    load_s = time.monotonic() - t
                    time.sleep(2)
                    m = c.members[0]
                    os.sync()
                    memory[name] = {"keys": n, "load_s": load_s, "rss_kib": current_rss_kib(m.proc.pid),
                                    "peak_kib": m.rss_kib(), "disk_bytes": dir_bytes(m.data_dir),
                                    "errors": r["errors"]}
                    if r["errors"]:
                        odd.append(f"{name} memory load: {r['error_text']}")
                    log(f"memory {name:5} {n} keys of 256 B loaded in {load_s:.0f} s: RSS "
                        f"{memory[name]['rss_kib'] / 1024:.0f} MiB (peak {memory[name]['peak_kib'] / 1024:.0f} MiB),"
                        f" data dir {memory[name]['disk_bytes'] / 2**20:.0f} MiB")
                finally:
                    finish(c)

        if p["scale_steps"]:
            # etcd's default 2 GiB backend quota would stop it before 10M keys: 8 GiB for both.
            quota = ["--quota-backend-bytes", str(8 * 2**30)]
            for name, binary in servers:
                c = start(name, binary, run_dir, 1, quota)
                try:
                    loaded = 0
                    for n in p["scale_steps"]:
                        t = time.monotonic()
                        r = runner.run("ours", c.endpoints, ["--workload", "range", "--preload", str(n),
                                                             "--preload-start", str(loaded), "--clients", "100",
                                                             "--val-size", "256"], 1)
                        loaded = n
                        if r["errors"]:
                            odd.append(f"{name} scale load to {n}: {r['error_text']}")
                            break
                        step = {"load_s": time.monotonic() - t,
                                "disk_bytes": dir_bytes(c.members[0].data_dir),
                                "rss_kib": current_rss_kib(c.members[0].proc.pid)}
                        for label, args in (
                                ("put 1 client", ["--workload", "put", "--clients", "1", "--conns", "1"]),
                                ("put 1000 clients", ["--workload", "put"]),
                                ("range l 1 client", ["--workload", "range", "--skip-preload", "--preload", str(n),
                                                      "--clients", "1", "--conns", "1"]),
                                ("range l 1000 clients", ["--workload", "range", "--skip-preload", "--preload",
                                                          str(n)])):
                            step[label] = runner.run("ours", c.endpoints, args, p["seconds"])
                            if step[label]["errors"]:
                                odd.append(f"{name} scale {n} {label}: {step[label]['error_text']}")
                        scale[(name, n)] = step
                        log(f"scale {name:5} {n:>9} keys (loaded in {step['load_s']:.0f} s, data dir "
                            f"{step['disk_bytes'] / 2**20:.0f} MiB, RSS {step['rss_kib'] / 1024:.0f} MiB): " +
                            ", ".join(f"{k} {step[k]['rps']:.0f}/s p99 {step[k]['p99']:.2f} ms"
                                      for k in step if isinstance(step[k], dict)))
                finally:
                    finish(c)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        if pki:
            pki.cleanup()

    elapsed = time.monotonic() - t0
    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(a.results_dir, exist_ok=True)
    base = os.path.join(a.results_dir, f"compare-{profile}-{stamp}")
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731

    lines = [f"### {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC — `{profile}` profile, "
             f"commit {commit}, {os.cpu_count()} cores (shared), {disk}", "",
             f"Load average before the run: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; "
             f"took {elapsed / 60:.1f} min; medians of {p['rounds']} alternating rounds; loadgen runs "
             f"{p['seconds']} s each, etcd's tool {p['tool_total']} requests (1 client: 2000).", ""]
    if results:
        keys = []
        for (members, kind, wname, _s) in results:
            if (members, kind, wname) not in keys:
                keys.append((members, kind, wname))
        for ref in refs:
            label = REF_LABELS.get(ref, ref)
            lines += [f"etcdq against {label}:", "",
                      f"| members | tool | workload | {label} req/s | etcdq req/s | ratio | {label} p50 ms | etcdq p50 ms "
                      f"| {label} p99 ms | etcdq p99 ms | p99 ratio |",
                      "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for members, kind, wname in keys:
                e = results.get((members, kind, wname, ref), [])
                q = results.get((members, kind, wname, "etcdq"), [])
                if not e or not q:
                    continue
                m = {s: {k: med([r[k] for r in rs]) for k in ("rps", "p50", "p99")} for s, rs in (("ref", e), ("etcdq", q))}
                tool_name = {"tool": "etcd benchmark", "ours": "etcdq_loadgen", "watch": "etcdq_watch_bench"}[kind]
                unit = " (events/s; commit→delivery ms)" if kind == "watch" else ""
                lines.append(f"| {members} | {tool_name} | {wname}{unit} | {m['ref']['rps']:.0f} | {m['etcdq']['rps']:.0f} "
                             f"| {m['etcdq']['rps'] / m['ref']['rps']:.2f} | {m['ref']['p50']:.2f} | "
                             f"{m['etcdq']['p50']:.2f} | {m['ref']['p99']:.2f} | {m['etcdq']['p99']:.2f} | "
                             f"{m['etcdq']['p99'] / m['ref']['p99'] if m['ref']['p99'] else float('nan'):.2f} |")
            lines.append("")
            for members, kind, wname in keys:
                per = {s: [r["events_per_response"] for r in results.get((members, kind, wname, s), [])
                           if "events_per_response" in r] for s in (ref, "etcdq")}
                if per[ref] and per["etcdq"]:
                    lines.append(f"Events per watch response, {wname} (median): {label} {med(per[ref]):.2f}, "
                                 f"etcdq {med(per['etcdq']):.2f}.")
            for members in (1, 3):
                if (members, ref) in rss and (members, "etcdq") in rss:
                    e, q = med(rss[(members, ref)]) / 1024, med(rss[(members, "etcdq")]) / 1024
                    lines.append(f"Peak RSS, {members} member(s){' summed' if members > 1 else ''}, over all workloads "
                                 f"(median): {label} {e:.0f} MiB, etcdq {q:.0f} MiB (ratio {q / e:.2f}).")
            lines.append("")
        for members, kind, wname in keys:
            pr = results.get((members, kind, wname, "probe"), [])
            q = results.get((members, kind, wname, "etcdq"), [])
            if pr and q:
                c, v = med([r["rps"] for r in pr]), med([r["rps"] for r in q])
                lines.append(f"gRPC-only probe's ceiling (bench/grpc_api_probe, callback API, no disk), {wname}: "
                             f"{c:.0f} req/s; etcdq {v:.0f} req/s is {v / c:.0%} of it.")
        lines.append("")
    for ref in refs if memory else []:
        label = REF_LABELS.get(ref, ref)
        lines += [f"| memory after loading | {label} | etcdq | ratio |", "| --- | ---: | ---: | ---: |"]
        e, q = memory.get(ref), memory.get("etcdq")
        if e and q:
            lines.append(f"| RSS, {e['keys']} keys of 256 B, MiB | {e['rss_kib'] / 1024:.0f} | {q['rss_kib'] / 1024:.0f} "
                         f"| {q['rss_kib'] / e['rss_kib']:.2f} |")
            lines.append(f"| peak RSS, MiB | {e['peak_kib'] / 1024:.0f} | {q['peak_kib'] / 1024:.0f} | "
                         f"{q['peak_kib'] / e['peak_kib']:.2f} |")
            lines.append(f"| data dir on disk, MiB | {e['disk_bytes'] / 2**20:.0f} | {q['disk_bytes'] / 2**20:.0f} | "
                         f"{q['disk_bytes'] / e['disk_bytes']:.2f} |")
            lines.append(f"| load time (Txns of 100 puts, 32 in flight), s | {e['load_s']:.0f} | {q['load_s']:.0f} | "
                         f"{q['load_s'] / e['load_s']:.2f} |")
        lines.append("")
    if scale:
        lines += ["| keys | server | data dir MiB | RSS MiB | put 1 client p99 ms | put 1000 clients req/s, p99 ms "
                  "| range l 1 client p99 ms | range l 1000 clients req/s, p99 ms |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for (name, n), s in sorted(scale.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            lines.append(f"| {n} | {name} | {s['disk_bytes'] / 2**20:.0f} | {s['rss_kib'] / 1024:.0f} | "
                         f"{s['put 1 client']['p99']:.2f} | {s['put 1000 clients']['rps']:.0f}, "
                         f"{s['put 1000 clients']['p99']:.2f} | {s['range l 1 client']['p99']:.2f} | "
                         f"{s['range l 1000 clients']['rps']:.0f}, {s['range l 1000 clients']['p99']:.2f} |")
        lines.append("")
    if sweep:
        pts = {k: {n: (med([x[0] for x in v]), med([x[1] for x in v])) for n, v in d.items()} for k, d in sweep.items()}
        png = base + ".png"
        if plot(pts, png, f"{' and '.join(REF_LABELS.get(r, r) for r in refs)} vs etcdq, 1 member, etcdq_loadgen, {p['sweep_seconds']} s per point, "
                          f"medians of {p['rounds']} rounds, commit {commit}, {os.cpu_count()} shared cores"):
            lines.append(f"Throughput and p99 against clients: `{os.path.relpath(png, ROOT)}`.")
        lines.append("")
        lines.append("| sweep (etcdq_loadgen, 1 member) | " + " | ".join(f"{n} clients" for n in p["sweep"]) + " |")
        lines.append("| --- |" + " ---: |" * len(p["sweep"]))
        for k in sorted(pts):
            lines.append(f"| {k[0]} {k[1]} req/s (p99 ms) | " +
                         " | ".join(f"{pts[k][n][0]:.0f} ({pts[k][n][1]:.1f})" for n in p["sweep"] if n in pts[k]) + " |")
        lines.append("")
    for x in odd:
        lines.append(f"- unexpected: {x}")
    if odd:
        lines.append("")
    lines += ["<details><summary>every run, in order</summary>", "", "```"] + runs + ["```", "", "</details>", ""]
    table = "\n".join(lines)
    print("\n" + table)
    with open(base + ".json", "w") as f:
        json.dump({"profile": profile, "commit": commit, "disk": disk, "load_before": load_before,
                   "elapsed_s": elapsed, "references": {r: REF_LABELS.get(r, r) for r in refs}, "results": [{"members": k[0], "kind": k[1], "workload": k[2],
                                                      "server": k[3], "runs": v} for k, v in results.items()],
                   "rss_kib": {f"{k[0]}:{k[1]}": v for k, v in rss.items()}, "memory": memory,
                   "scale": [{"server": k[0], "keys": k[1], **v} for k, v in scale.items()],
                   "sweep": [{"server": k[0], "workload": k[1], "points": v} for k, v in sweep.items()],
                   "unexpected": odd}, f, indent=1)
    print(f"results: {base}.json; took {elapsed:.0f} s")
    if a.out:
        css.append_section(a.out, table, SECTION, INTRO)
    return 1 if odd else 0


if __name__ == "__main__":
    sys.exit(main())
