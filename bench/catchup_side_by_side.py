#!/usr/bin/python3
"""How fast a member that fell behind serves again: 3-member clusters of etcd 3.6 and of
etcdq, side by side, alternating (etcd, etcdq, etcd, etcdq, ...), a fresh cluster each round.

    /usr/bin/python3 bench/catchup_side_by_side.py [--rounds 3] [--out bench/RESULTS.md]

Three scenarios a round, each under write load from etcd's `benchmark put` (etcd 3.6's
tool, --clients/--conns below, 256-byte values, keys spread over 100000) sent to the
members that are not under test, running through the whole scenario:
 1. pause: the leader is stopped (SIGSTOP) for --pause s, then continued (SIGCONT);
    measured: from SIGCONT to the first linearizable Range answered by that member
    (each try on a fresh channel with a 0.5 s deadline, tries 10 ms apart).
 2. add: a member is added (Cluster.MemberAdd, as a voter) and started with
    --initial-cluster-state existing; measured: from its start to the first linearizable
    Range it answers.
 3. restart: a follower is SIGKILLed, kept down --down s, and started again on its data dir;
    measured: from its start to the first linearizable Range it answers.
For each, the snapshots the member under test installed are counted from its log from the
start of the scenario until --settle s after it served (etcd: "applied snapshot"; etcdq:
"installing the snapshot at index"), and the load's rate is read from the tool's report.
Both servers get the same flags (--heartbeat-interval, --election-timeout; --snapshot-count
and --snapshot-catchup-entries only when given: otherwise each server's default). Members
run in this script's session (see bench/cluster_side_by_side.py).

Prints every run and a markdown table (medians, and every run's figures); --out appends it
under "## Catch-up (3 members)" in that file. Member logs are kept (path printed) when
anything unexpected happens, or always with --keep-logs.
"""
import argparse, glob, os, shutil, signal, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import cluster_side_by_side as csb  # noqa: E402

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

SECTION = "## Catch-up (3 members)"
INTRO = """`/usr/bin/python3 bench/catchup_side_by_side.py` (see its docstring): a fresh 3-member etcd 3.6
cluster, then a fresh etcdq cluster, alternating, with the same flags on loopback; in each, under
`benchmark put` load on the members not under test: a leader paused 4 s (SIGSTOP/SIGCONT), a member
added, a follower SIGKILLed and restarted; seconds until that member answers a linearizable Range,
and the snapshots it installed meanwhile.
"""
INSTALL_LINE = {"etcd": "applied snapshot", "etcdq": "installing the snapshot at index"}


def etcd36_dir():
    d = os.environ.get("ETCD36_DIR")
    if d:
        return d
    found = sorted(glob.glob(os.path.expanduser("~/.cache/etcdq/etcd-v3.6.17-*")))
    if not found:
        sys.exit("no etcd 3.6 (run scripts/etcd36.sh, or set ETCD36_DIR)")
    return found[-1]


class Member(csb.Member):
    """cluster_side_by_side's member, with --snapshot-count/--snapshot-catchup-entries only when given and
    its own --initial-cluster and state (an added member's)."""

    def __init__(self, cluster, name):
        super().__init__(cluster, name)
        self.initial_cluster, self.state = None, "new"

    def args(self):
        c = self.cluster
        a = [c.binary, "--name", self.name, "--data-dir", self.data_dir,
             "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
             "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
             "--initial-cluster", self.initial_cluster or c.initial_cluster, "--initial-cluster-state", self.state,
             "--initial-cluster-token", c.token,
             "--heartbeat-interval", str(c.heartbeat_ms), "--election-timeout", str(c.election_ms)]
        if c.snapshot_count:
            a += ["--snapshot-count", str(c.snapshot_count)]
        if c.catchup_entries:
            a += ["--snapshot-catchup-entries", str(c.catchup_entries)]
        return a

    def log_count(self, text):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read().count(text)
        except FileNotFoundError:
            return 0


class Cluster(csb.Cluster):
    def __init__(self, label, binary, root, a):
        self.catchup_entries = a.snapshot_catchup_entries
        super().__init__(label, binary, root, a.heartbeat_interval, a.election_timeout, a.snapshot_count)
        # This file's members (the base class made its own; none has started).
        self.members = [Member(self, m.name) for m in self.members]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        self.endpoints = ",".join(m.endpoint for m in self.members)

    def add_member_object(self, name):
        m = Member(self, name)
        self.members.append(m)
        return m


def revision(c, endpoints):
    for e in endpoints:
        try:
            with c.channel(e) as ch:
                return rpc_pb2_grpc.MaintenanceStub(ch).Status(rpc_pb2.StatusRequest(), timeout=2).header.revision
        except grpc.RpcError:
            continue
    return None


class Load:
    """etcd's `benchmark put` against `endpoints` until stop(); its rate, from the revisions
    (each Put makes one) a member reported at the start and at the stop."""

    def __init__(self, c, tool, endpoints, a):
        self.c, self.endpoints = c, endpoints
        self.rev0 = revision(c, endpoints)
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [tool, "--endpoints", ",".join(endpoints), "--conns", str(a.conns), "--clients", str(a.clients),
             "put", "--key-size", "8", "--val-size", "256", "--total", "100000000", "--key-space-size", "100000"],
            stdout=self.out, stderr=subprocess.DEVNULL, process_group=0)
        self.t0 = time.monotonic()

    def stop(self):
        """Stops the tool and returns its rate, Puts/s (None if unknown)."""
        rev1 = revision(self.c, self.endpoints)
        elapsed = time.monotonic() - self.t0
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.out.close()
        return None if self.rev0 is None or rev1 is None else (rev1 - self.rev0) / elapsed


def serves(c, m, timeout=0.5):
    try:
        with c.channel(m.endpoint) as ch:
            rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=b"foo"), timeout=timeout)
        return True
    except grpc.RpcError:
        return False


def wait_serves(c, m, t0, limit):
    """Seconds from t0 to the first linearizable Range `m` answers (None after `limit` s)."""
    while time.monotonic() - t0 < limit:
        if not m.running():
            raise csb.Odd(f"{m.name} exited (status {m.proc.returncode})")
        if serves(c, m):
            secs = time.monotonic() - t0
            m.note(f"served a linearizable Range, {secs:.2f} s after the scenario's start")
            return secs
        time.sleep(0.01)
    return None


def settle(c, m, installs_before, a):
    time.sleep(a.settle)
    return m.log_count(INSTALL_LINE[c.label]) - installs_before


def scenario_pause(c, tool, a):
    leader, _term = c.leader()
    m = c.members[leader]
    others = [x.endpoint for i, x in enumerate(c.members) if i != leader and x.running()]
    before = m.log_count(INSTALL_LINE[c.label])
    load = Load(c, tool, others, a)
    try:
        time.sleep(a.warmup)
        m.note(f"SIGSTOP for {a.pause} s")
        os.killpg(m.proc.pid, signal.SIGSTOP)
        time.sleep(a.pause)
        os.killpg(m.proc.pid, signal.SIGCONT)
        t0 = time.monotonic()
        secs = wait_serves(c, m, t0, a.limit)
        installs = settle(c, m, before, a)
    finally:
        try:
            os.killpg(m.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        rate = load.stop()
    return {"s": secs, "installs": installs, "rate": rate, "member": m.name}


def scenario_add(c, tool, a):
    live = [x for x in c.members if x.running()]
    load = Load(c, tool, [x.endpoint for x in live], a)
    try:
        time.sleep(a.warmup)
        m = c.add_member_object(f"m{len(c.members)}")
        with c.channel(live[0].endpoint) as ch:
            resp = rpc_pb2_grpc.ClusterStub(ch).MemberAdd(rpc_pb2.MemberAddRequest(peerURLs=[m.peer_url]),
                                                          timeout=20)
        names = {x.peer_url: x.name for x in c.members}
        m.initial_cluster = ",".join(f"{names.get(u, mem.name)}={u}"
                                     for mem in resp.members for u in mem.peerURLs)
        m.state = "existing"
        m.spawn()
        t0 = time.monotonic()
        secs = wait_serves(c, m, t0, a.limit)
        installs = settle(c, m, 0, a)
    finally:
        rate = load.stop()
    return {"s": secs, "installs": installs, "rate": rate, "member": m.name}


def scenario_restart(c, tool, a):
    leader, _term = c.leader()
    i = next(k for k, x in enumerate(c.members) if k != leader and x.running())
    m = c.members[i]
    others = [x.endpoint for k, x in enumerate(c.members) if k != i and x.running()]
    load = Load(c, tool, others, a)
    try:
        time.sleep(a.warmup)
        m.note(f"SIGKILL, down for {a.down} s")
        m.kill9()
        m.proc.wait()
        time.sleep(a.down)
        before = m.log_count(INSTALL_LINE[c.label])
        m.spawn()
        t0 = time.monotonic()
        secs = wait_serves(c, m, t0, a.limit)
        installs = settle(c, m, before, a)
    finally:
        rate = load.stop()
    return {"s": secs, "installs": installs, "rate": rate, "member": m.name}


SCENARIOS = [("pause", scenario_pause), ("restart", scenario_restart), ("add", scenario_add)]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=2):
    return "never" if x is None else f"{x:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--etcd", default=None, help="etcd 3.6's binary (default: $ETCD36_DIR/etcd)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenarios", default="pause,restart,add")
    ap.add_argument("--heartbeat-interval", type=int, default=100, help="ms (etcd's default)")
    ap.add_argument("--election-timeout", type=int, default=1000, help="ms (etcd's default)")
    ap.add_argument("--snapshot-count", type=int, default=0, help="0: each server's default")
    ap.add_argument("--snapshot-catchup-entries", type=int, default=0, help="0: each server's default")
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--conns", type=int, default=20)
    ap.add_argument("--warmup", type=float, default=3.0, help="s of load before the fault")
    ap.add_argument("--pause", type=float, default=4.0, help="s the leader is stopped")
    ap.add_argument("--down", type=float, default=4.0, help="s the restarted follower is down")
    ap.add_argument("--settle", type=float, default=3.0, help="s after serving in which installs still count")
    ap.add_argument("--limit", type=float, default=60.0, help="s to wait for the member to serve")
    ap.add_argument("--only", choices=["etcd", "etcdq"])
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: sys.exit(128 + s))

    e36 = etcd36_dir()
    tool = os.path.join(e36, "benchmark")
    root = os.environ.get("BENCH_DIR", "/var/tmp")
    run_dir = tempfile.mkdtemp(prefix="catchup-bench-", dir=root)
    logs_dir = os.path.join(root, "catchup-bench-logs-" + time.strftime("%Y%m%d-%H%M%S"))
    etcdq = os.path.join(run_dir, "etcdq")
    shutil.copy2(a.etcdq, etcdq)
    commit = csb.commit_line()
    servers = [("etcd", a.etcd or os.path.join(e36, "etcd")), ("etcdq", etcdq)]
    if a.only:
        servers = [s for s in servers if s[0] == a.only]
    wanted = [s for s in SCENARIOS if s[0] in a.scenarios.split(",")]
    results = {(sc, s): [] for sc, _f in wanted for s, _b in servers}
    loads = [os.getloadavg()]
    lines = []

    def log(line):
        lines.append(line)
        print(line, flush=True)

    t_start = time.monotonic()
    odd = False
    try:
        for rnd in range(a.rounds):
            for name, binary in servers:
                c = Cluster(name, binary, run_dir, a)
                try:
                    c.start()
                    for sc, fn in wanted:
                        r = fn(c, tool, a)
                        results[(sc, name)].append(r)
                        log(f"round {rnd + 1} {name:6} {sc:8} {r['member']} served after {fmt(r['s'])} s, "
                            f"{r['installs']} snapshot install(s), load {fmt(r['rate'], 0)} req/s")
                        if r["s"] is None:
                            odd = True
                        c.check_alive(f"after {sc}")
                        loads.append(os.getloadavg())
                except csb.Odd as e:
                    odd = True
                    log(f"round {rnd + 1} {name}: odd: {e}")
                finally:
                    c.stop()
                    if a.keep_logs or odd:
                        print("logs kept in", c.keep_logs(os.path.join(logs_dir, f"round{rnd + 1}-{name}")))
                    c.remove()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    took = (time.monotonic() - t_start) / 60
    load_text = ", ".join(f"{x[0]:.1f}" for x in loads)
    head = (f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} — commit {commit}, "
            f"{os.cpu_count()} cores (shared)\n\n"
            f"{a.rounds} rounds, took {took:.1f} min; --heartbeat-interval {a.heartbeat_interval} "
            f"--election-timeout {a.election_timeout}, snapshot-count "
            f"{a.snapshot_count or 'default'}, snapshot-catchup-entries {a.snapshot_catchup_entries or 'default'}; "
            f"load `benchmark put` {a.clients} clients {a.conns} conns; pause {a.pause} s, down {a.down} s; "
            f"one-minute load average during the run: {load_text}.\n")
    table = ["| scenario | etcd s (median) | etcdq s (median) | etcd runs: s / installs | "
             "etcdq runs: s / installs | load req/s etcd / etcdq (median) |",
             "| --- | ---: | ---: | --- | --- | --- |"]
    for sc, _f in wanted:
        row = {}
        for name, _b in servers:
            rs = results[(sc, name)]
            row[name] = (median([r["s"] for r in rs]),
                         ", ".join(f"{fmt(r['s'])} / {r['installs']}" for r in rs),
                         median([r["rate"] for r in rs]))
        e, q = row.get("etcd", (None, "", None)), row.get("etcdq", (None, "", None))
        table.append(f"| {sc} | {fmt(e[0])} | {fmt(q[0])} | {e[1]} | {q[1]} | {fmt(e[2], 0)} / {fmt(q[2], 0)} |")
    text = head + "\n" + "\n".join(table) + "\n\n<details><summary>runs</summary>\n\n```\n" + \
        "\n".join(lines) + "\n```\n\n</details>\n"
    print()
    print(text)
    if a.out:
        csb.append_section(a.out, text, SECTION, INTRO)
    return 1 if odd else 0


if __name__ == "__main__":
    sys.exit(main())
