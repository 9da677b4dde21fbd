#!/usr/bin/python3
"""3-member clusters of Debian's etcd 3.4 and of etcdq, side by side: throughput
with etcd's own load generator spread over the three client endpoints, then
leader failover time under a continuous writer.

    /usr/bin/python3 bench/cluster_side_by_side.py [--rounds 2] [--failover-trials 20] [--out bench/RESULTS.md]

Each round starts a fresh 3-member etcd cluster, measures, stops it, then the
same for a fresh etcdq cluster (A B A B ...). Both get the same etcd flags: all
members on loopback on free ports, each member's data dir under one temp dir
(in $BENCH_DIR, default /var/tmp), the same --heartbeat-interval,
--election-timeout, --snapshot-count. Members run in this script's session
(their own process groups), like bench/side_by_side.py's servers: with the
kernel's autogroup scheduling a new session would get a fixed share of the CPU
against the load generator.

On each cluster:
 1. `benchmark --endpoints m0,m1,m2 --conns 100 --clients 1000 put ...` and
    `... range foo --consistency l` (key and value sizes from side_by_side.py);
    the tool spreads its connections round-robin over the endpoints. Peak RSS
    (VmHWM) summed over the three members is read after these two runs.
 2. failover trials (--failover-trials per server, spread over the rounds):
    with an open-loop writer (a Put every --writer-interval s, round-robin over
    the members, each with a --writer-deadline s deadline, never waiting for
    earlier Puts), find the leader with Maintenance.Status, SIGKILL it, and
    record the time from the kill to the first acknowledged Put that was sent
    after the kill (the writer stops sending to the killed member). Then restart
    the killed member on its data dir and wait until it reports a leader,
    answers a linearizable Range and acknowledges a Put of the writer, and the
    whole cluster has written through all three members for a second without
    an error, before the next trial.

Prints every run and a markdown table; --out appends it (date, commit, cores,
disk) under "## Clusters (3 members)" in that file. Member logs are kept (and
their path printed) when anything unexpected happens, or always with --keep-logs.
"""
import argparse, datetime, math, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import side_by_side as sbs  # noqa: E402

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

SECTION = "## Clusters (3 members)"
INTRO = """`/usr/bin/python3 bench/cluster_side_by_side.py` (see bench/README.md): each round
starts a fresh 3-member etcd 3.4 cluster, then a fresh 3-member etcdq cluster, with the same
flags, all on loopback; etcd's `benchmark` spreads its connections over the three client
endpoints; then leader SIGKILLs under an open-loop writer, on the same cluster.
"""
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.min_reconnect_backoff_ms", 1000),
                   ("grpc.max_reconnect_backoff_ms", 1000)]


def workload_args(name, total):
    """side_by_side.py's arguments for `name`, with --total replaced."""
    args = list(dict(sbs.WORKLOADS)[name])
    args[args.index("--total") + 1] = str(total)
    return args


class Odd(Exception):
    """Something a healthy cluster should not do; the message says what."""


# ---- members and clusters ---------------------------------------------------------------

def clock():
    """UTC wall time with milliseconds, as the members' log lines carry it: the notes written
    into a member's log line up with its own lines (a timeline of a scenario)."""
    t = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


class Member:
    def __init__(self, cluster, name):
        self.cluster, self.name = cluster, name
        self.data_dir = os.path.join(cluster.dir, name)
        self.log_path = os.path.join(cluster.dir, name + ".log")
        self.client_port, self.peer_port = sbs.free_port(), sbs.free_port()
        self.endpoint = f"127.0.0.1:{self.client_port}"
        self.client_url = f"{'https' if cluster.tls else 'http'}://{self.endpoint}"
        self.peer_url = f"{'https' if cluster.peer_tls else 'http'}://127.0.0.1:{self.peer_port}"
        self.proc = None
        self.id = None
        self.starts = 0
        self.expected_exit = False

    def args(self):
        c = self.cluster
        return [c.binary, "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
                "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", c.initial_cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", c.token,
                "--heartbeat-interval", str(c.heartbeat_ms), "--election-timeout", str(c.election_ms),
                "--snapshot-count", str(c.snapshot_count), "--pre-vote=" + ("true" if c.pre_vote else "false")
                ] + c.tls_args() + list(c.extra_args)

    def spawn(self):
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== bench: start #{self.starts} at {clock()}\n".encode())
            log.flush()
            # Own process group (to kill it whole), same session (see the module doc).
            self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, process_group=0)
        self.expected_exit = False

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def note(self, text):
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== bench: {text} at {clock()}\n".encode())

    def kill9(self):
        self.expected_exit = True
        os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self, timeout=20):
        """SIGTERM, then SIGKILL after `timeout` s; returns False if SIGKILL was needed."""
        if not self.running():
            return True
        self.expected_exit = True
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.note(f"did not stop within {timeout} s of SIGTERM; SIGKILLed")
            return False

    def rss_kib(self):
        return sbs.peak_rss_kib(self.proc.pid)

    def status(self, timeout=1.0):
        """Maintenance.Status on a fresh channel (one that saw the member die backs off)."""
        with self.cluster.channel(self.endpoint) as ch:
            st = rpc_pb2_grpc.MaintenanceStub(ch).Status(rpc_pb2.StatusRequest(), timeout=timeout)
        self.id = st.header.member_id
        return st

    def linearizable_range(self, timeout=2.0):
        with self.cluster.channel(self.endpoint) as ch:
            rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=b"foo"), timeout=timeout)

    def wait_serving(self, timeout):
        """Until Status names a leader and a linearizable Range answers."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if not self.running():
                raise Odd(f"{self.name} exited with status {self.proc.returncode} while starting")
            try:
                st = self.status()
                if st.leader == 0:
                    last = "Status: no leader"
                else:
                    self.linearizable_range()
                    return
            except grpc.RpcError as e:
                last = f"{e.code().name}: {e.details()}"
            time.sleep(0.05)
        raise Odd(f"{self.name} not serving within {timeout:.0f} s (last: {last})")


class Cluster:
    def __init__(self, label, binary, root, heartbeat_ms, election_ms, snapshot_count, size=3, tls=None,
                 peer_tls=None):
        self.label, self.binary = label, binary
        self.dir = tempfile.mkdtemp(prefix=f"cluster-bench-{label}-", dir=root)
        self.heartbeat_ms, self.election_ms, self.snapshot_count = heartbeat_ms, election_ms, snapshot_count
        self.pre_vote = False
        self.extra_args = []    # more flags, the same for every member
        # TLS (a tests/integration/tlslib.Pki): `tls` for https client URLs with
        # client-cert auth, `peer_tls` for https peer URLs with peer-client-cert
        # auth; set before the members are made (here, from the arguments).
        self.tls, self.peer_tls = tls, peer_tls
        self.token = f"cluster-bench-{label}-{os.getpid()}-{int(time.time())}"
        self.members = [Member(self, f"m{i}") for i in range(size)]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        self.endpoints = ",".join(m.endpoint for m in self.members)
        self.odd = []           # what went wrong, for the report
        self.stop_failures = []

    def start(self, timeout=60):
        for m in self.members:
            m.spawn()
        deadline = time.monotonic() + timeout
        for m in self.members:
            m.wait_serving(max(1.0, deadline - time.monotonic()))
        with self.channel(self.members[0].endpoint) as ch:
            rpc_pb2_grpc.KVStub(ch).Put(rpc_pb2.PutRequest(key=b"foo", value=b"bar"), timeout=10)

    def tls_args(self):
        """The TLS flags every member gets (etcd's names, so both servers take them)."""
        out = []
        if self.tls:
            t = self.tls
            out += ["--cert-file", t.server, "--key-file", t.server_key, "--trusted-ca-file", t.ca,
                    "--client-cert-auth"]
        if self.peer_tls:
            t = self.peer_tls
            out += ["--peer-cert-file", t.server, "--peer-key-file", t.server_key, "--peer-trusted-ca-file", t.ca,
                    "--peer-client-cert-auth"]
        return out

    def tool_tls_args(self):
        """etcd benchmark's flags for the client side of `tls_args`."""
        t = self.tls
        return ["--cacert", t.ca, "--cert", t.client, "--key", t.client_key] if t else []

    def channel(self, endpoint):
        """A gRPC channel to one member's client endpoint, TLS when the cluster uses it."""
        if not self.tls:
            return grpc.insecure_channel(endpoint, options=CHANNEL_OPTIONS)
        read = lambda p: open(p, "rb").read()  # noqa: E731
        t = self.tls
        creds = grpc.ssl_channel_credentials(read(t.ca), read(t.client_key), read(t.client))
        return grpc.secure_channel(endpoint, creds, options=CHANNEL_OPTIONS)

    def check_alive(self, where):
        for m in self.members:
            if m.proc is not None and not m.expected_exit and m.proc.poll() is not None:
                raise Odd(f"{m.name} exited unexpectedly (status {m.proc.returncode}) {where}")

    def statuses(self, timeout=1.0):
        out = {}
        for i, m in enumerate(self.members):
            if m.running():
                try:
                    out[i] = m.status(timeout)
                except grpc.RpcError:
                    pass
        return out

    def leader(self, timeout=30.0):
        """(index, term) of the member whose Status says it leads."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, st in self.statuses().items():
                if st.leader and st.leader == st.header.member_id:
                    return i, st.raftTerm
            time.sleep(0.02)
        raise Odd(f"no leader within {timeout:.0f} s")

    def rss_kib(self):
        return sum(m.rss_kib() for m in self.members)

    def stop(self):
        for m in self.members:
            if m.running():
                m.expected_exit = True
                os.killpg(m.proc.pid, signal.SIGTERM)
        for m in self.members:
            if not m.stop():
                self.stop_failures.append(m.name)

    def keep_logs(self, dest):
        os.makedirs(dest, exist_ok=True)
        for m in self.members:
            if os.path.exists(m.log_path):
                shutil.copy(m.log_path, os.path.join(dest, os.path.basename(m.log_path)))
        return dest

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- failover ------------------------------------------------------------------------------

class Writer:
    """Open-loop writer: every `interval` s one Put of a fresh key to the next target
    (round-robin, one channel per member), with a `deadline` s deadline, never waiting
    for earlier Puts (at most `max_in_flight` outstanding)."""

    def __init__(self, cluster, interval, deadline, max_in_flight=2000):
        self.cluster, self.interval, self.deadline, self.max_in_flight = cluster, interval, deadline, max_in_flight
        self.lock = threading.Lock()
        self.done = []             # (start, end, target, ok, error)
        self.in_flight = 0
        self.channels = {}
        self.stubs = {}
        self.targets = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="writer", daemon=True)

    def set_targets(self, targets, fresh=()):
        with self.lock:
            for i in targets:
                if i in fresh and i in self.channels:
                    self.channels.pop(i).close()
                    self.stubs.pop(i)
                if i not in self.stubs:
                    ch = grpc.insecure_channel(self.cluster.members[i].endpoint, options=CHANNEL_OPTIONS)
                    self.channels[i] = ch
                    self.stubs[i] = rpc_pb2_grpc.KVStub(ch)
            self.targets = list(targets)

    def start(self):
        self.thread.start()
        return self

    def run(self):
        n = 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            with self.lock:
                targets, busy = self.targets, self.in_flight >= self.max_in_flight
                if targets and not busy:
                    target = targets[n % len(targets)]
                    stub = self.stubs[target]
                    self.in_flight += 1
            if targets and not busy:
                start = time.monotonic()
                try:
                    fut = stub.Put.future(rpc_pb2.PutRequest(key=b"failover/%09d" % n, value=b"v%d" % n),
                                          timeout=self.deadline)
                    fut.add_done_callback(lambda f, s=start, t=target: self.finish(s, t, f))
                except Exception as e:  # a closed channel
                    self.record(start, target, False, type(e).__name__)
                n += 1
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self.stopping.wait(delay)
            else:
                next_at = time.monotonic()

    def finish(self, start, target, fut):
        try:
            fut.result()
            self.record(start, target, True, None)
        except grpc.RpcError as e:
            self.record(start, target, False, f"{e.code().name}: {e.details()}")
        except Exception as e:
            self.record(start, target, False, type(e).__name__)

    def record(self, start, target, ok, error):
        with self.lock:
            self.done.append((start, time.monotonic(), target, ok, error))
            self.in_flight -= 1

    def first_success_after(self, t):
        with self.lock:
            ends = [end for start, end, _t, ok, _e in self.done if ok and start >= t]
        return min(ends) if ends else None

    def since(self, t):
        with self.lock:
            return [d for d in self.done if d[0] >= t]

    def stop(self):
        self.stopping.set()
        self.thread.join()
        deadline = time.monotonic() + self.deadline + 5
        while time.monotonic() < deadline and self.in_flight:
            time.sleep(0.02)
        for ch in self.channels.values():
            ch.close()


class LeaderWatch(threading.Thread):
    """Polls Status on `indexes` every `poll_s` s until one names a leader other than old_id."""

    def __init__(self, cluster, indexes, old_id, poll_s=0.01):
        super().__init__(name="leader-watch", daemon=True)
        self.chs = [grpc.insecure_channel(cluster.members[i].endpoint, options=CHANNEL_OPTIONS) for i in indexes]
        self.stubs = [rpc_pb2_grpc.MaintenanceStub(ch) for ch in self.chs]
        self.old_id, self.poll_s = old_id, poll_s
        self.t_elected = None
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set() and self.t_elected is None:
            for stub in self.stubs:
                try:
                    st = stub.Status(rpc_pb2.StatusRequest(), timeout=0.3)
                except grpc.RpcError:
                    continue
                if st.leader not in (0, self.old_id):
                    self.t_elected = time.monotonic()
                    break
            self.stopping.wait(self.poll_s)

    def finish(self):
        self.stopping.set()
        self.join()
        for ch in self.chs:
            ch.close()


def wait_steady(c, w, timeout, quiet_s=1.0):
    """Until every member has acknowledged a writer Put within the last `quiet_s` s and
    none failed in that time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c.check_alive("while waiting for a steady cluster")
        t = time.monotonic() - quiet_s
        recent = w.since(t)
        if recent and all(ok for *_x, ok, _e in recent) and \
                {tgt for _s, _e2, tgt, ok, _e in recent if ok} == set(range(len(c.members))):
            return
        time.sleep(0.1)
    errors = {}
    for *_x, ok, e in w.since(time.monotonic() - quiet_s):
        if not ok:
            errors[e] = errors.get(e, 0) + 1
    raise Odd(f"cluster not steady within {timeout:.0f} s (errors in the last {quiet_s} s: {errors})")


def failover_trials(c, trials, args, log, out):
    """Runs `trials` trials on a started cluster; appends a dict per trial to `out`."""
    w = Writer(c, args.writer_interval, args.writer_deadline)
    w.set_targets(range(len(c.members)))
    w.start()
    try:
        wait_steady(c, w, 60)
        for k in range(trials):
            old, term = c.leader()
            old_id = c.members[old].id
            survivors = [i for i in range(len(c.members)) if i != old]
            watch = LeaderWatch(c, survivors, old_id)
            c.members[old].note("SIGKILL (failover trial)")
            c.members[old].kill9()
            t_kill = time.monotonic()
            w.set_targets(survivors)
            watch.start()
            deadline = t_kill + args.failover_timeout
            while w.first_success_after(t_kill) is None and time.monotonic() < deadline:
                time.sleep(0.005)
            t_write = w.first_success_after(t_kill)
            c.members[old].proc.wait()
            # Status may name the new leader a little after the first write went through.
            watch.join(5.0)
            watch.finish()
            errors = {}
            for start, _end, _tgt, ok, err in w.since(t_kill):
                if not ok and (t_write is None or start < t_write):
                    errors[err] = errors.get(err, 0) + 1
            r = {"killed": c.members[old].name, "term": term,
                 "write_s": None if t_write is None else t_write - t_kill,
                 "elected_s": None if watch.t_elected is None else watch.t_elected - t_kill,
                 "failed_puts": sum(errors.values()), "errors": errors}
            if t_write is None:
                c.odd.append(f"failover trial {k + 1}: no Put acknowledged within "
                              f"{args.failover_timeout:.0f} s of killing the leader {r['killed']}")
            # Restart the old leader; healthy = serving, and the writer's Puts through it succeed.
            t_restart = time.monotonic()
            c.members[old].spawn()
            c.members[old].wait_serving(args.recover_timeout)
            w.set_targets(range(len(c.members)), fresh=[old])
            wait_steady(c, w, args.recover_timeout)
            r["healthy_s"] = time.monotonic() - t_restart
            out.append(r)
            log(f"  {c.label:6} trial {k + 1:2}: killed leader {r['killed']} (term {term}); "
                f"new leader seen {fmt_s(r['elected_s'])}, first write {fmt_s(r['write_s'])} after the kill; "
                f"{r['failed_puts']} Puts sent after the kill failed before it {errors_text(errors)}; "
                f"restarted member healthy after {r['healthy_s']:.2f} s")
            if t_write is None:
                break
    finally:
        w.stop()


def errors_text(errors):
    return "(" + ", ".join(f"{n}× {e}" for e, n in sorted(errors.items(), key=lambda x: -x[1])) + ")" \
        if errors else ""


def fmt_s(x):
    return "never" if x is None else f"{x:.3f} s"


# ---- the run ---------------------------------------------------------------------------------

def nearest_rank(xs, p):
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]


def disk_line(path):
    src = subprocess.run(["findmnt", "-n", "-T", path, "-o", "SOURCE,FSTYPE"], capture_output=True,
                         text=True).stdout.split()
    # fdatasync of 4 KiB, 200 times, on the data disk: what one durable write costs now.
    lat = []
    with tempfile.NamedTemporaryFile(dir=path) as f:
        for _ in range(200):
            f.write(b"x" * 4096)
            f.flush()
            t = time.perf_counter()
            os.fdatasync(f.fileno())
            lat.append(time.perf_counter() - t)
    dev = f"{src[1]} on {src[0]}" if len(src) >= 2 else "?"
    return f"data dirs in {path} ({dev}; 4 KiB fdatasync median {statistics.median(lat) * 1000:.2f} ms)"


def commit_line():
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "CMakeLists.txt"],
                           capture_output=True, text=True).stdout.strip()
    return head + (" (with uncommitted changes in src/)" if dirty else "")


def append_section(path, text, section=SECTION, intro=INTRO):
    """Appends `text` at the end of `section` in `path` (made at the end, with `intro`, if absent)."""
    body = open(path).read() if os.path.exists(path) else ""
    if section not in body:
        body = body.rstrip("\n") + "\n\n\n" + section + "\n\n" + intro + "\n" + text
    else:
        start = body.index(section) + len(section)
        m = re.search(r"^## ", body[start:], re.M)
        end = start + m.start() if m else len(body)
        body = body[:end].rstrip("\n") + "\n\n" + text + ("\n\n" + body[end:] if m else "")
    with open(path, "w") as f:
        f.write(body if body.endswith("\n") else body + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--put-total", type=int, default=150000)
    ap.add_argument("--range-total", type=int, default=150000)
    ap.add_argument("--heartbeat-interval", type=int, default=100, help="ms (etcd's default)")
    ap.add_argument("--election-timeout", type=int, default=1000, help="ms (etcd's default)")
    ap.add_argument("--snapshot-count", type=int, default=100000, help="etcd 3.4's default")
    ap.add_argument("--pre-vote", choices=["on", "off"], default="on",
                    help="--pre-vote for both servers (etcd 3.4's default: off; etcdq's: on)")
    ap.add_argument("--failover-trials", type=int, default=20, help="per server, spread over the rounds")
    ap.add_argument("--writer-interval", type=float, default=0.005, help="s between the writer's Puts")
    ap.add_argument("--writer-deadline", type=float, default=1.0, help="s, each writer Put's deadline")
    ap.add_argument("--failover-timeout", type=float, default=30.0)
    ap.add_argument("--recover-timeout", type=float, default=120.0)
    ap.add_argument("--skip-bench", action="store_true", help="failover trials only")
    ap.add_argument("--only", choices=["etcd", "etcdq"], help="one server only (development)")
    ap.add_argument("--keep-logs", action="store_true", help="keep every cluster's member logs")
    ap.add_argument("--out", default=None, help="append the table to this markdown file")
    a = ap.parse_args()

    # SIGTERM/SIGHUP end the run through the finally blocks that stop the members.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: sys.exit(128 + s))

    t0 = time.monotonic()
    root = os.environ.get("BENCH_DIR", "/var/tmp")
    run_dir = tempfile.mkdtemp(prefix="cluster-bench-", dir=root)
    logs_dir = os.path.join(root, "cluster-bench-logs-" + time.strftime("%Y%m%d-%H%M%S"))
    # Another build may replace build/etcdq meanwhile: run a copy taken now.
    etcdq = os.path.join(run_dir, "etcdq")
    shutil.copy2(a.etcdq, etcdq)
    commit = commit_line()  # the tree the copy was built from (as far as git can tell now)
    tool = sbs.benchmark_tool()
    disk = disk_line(root)
    servers = [("etcd", a.etcd), ("etcdq", etcdq)]
    if a.only:
        servers = [s for s in servers if s[0] == a.only]
    workloads = [("put", workload_args("put 1000 clients", a.put_total)),
                 ("range l", workload_args("range l 1000 clients", a.range_total))]
    bench = {(w, s): [] for w, _ in workloads for s, _ in servers}
    rss = {s: [] for s, _ in servers}
    trials = {s: [] for s, _ in servers}
    odd = {s: [] for s, _ in servers}
    runs = []

    def log(line):
        runs.append(line)
        print(line, flush=True)

    per_round = [a.failover_trials // a.rounds + (1 if r < a.failover_trials % a.rounds else 0)
                 for r in range(a.rounds)]
    try:
        for rnd in range(a.rounds):
            for name, binary in servers:
                c = Cluster(name, binary, run_dir, a.heartbeat_interval, a.election_timeout, a.snapshot_count)
                c.pre_vote = a.pre_vote == "on"
                keep = a.keep_logs
                try:
                    c.start()
                    if not a.skip_bench:
                        for wname, wargs in workloads:
                            _l, term0 = c.leader()
                            r = sbs.parse_benchmark(sbs.benchmark_output(tool, c.endpoints, wargs, timeout=900))
                            c.check_alive(f"during the {wname} benchmark")
                            _l, term1 = c.leader()
                            bench[(wname, name)].append(r)
                            extra = ""
                            if r["errors"]:
                                extra += f"  errors {r['errors']}"
                                c.odd.append(f"{wname}: benchmark errors {r['errors']}")
                            if term1 != term0:
                                extra += f"  leader elections during the run: term {term0} -> {term1}"
                                c.odd.append(f"{wname}: term {term0} -> {term1} during the run")
                            log(f"round {rnd + 1} {name:6} {wname:8} {r['rps']:9.0f} req/s  p50 "
                                f"{r['p50'] * 1000:7.2f} ms  p99 {r['p99'] * 1000:7.2f} ms  "
                                f"({r['total']:.1f} s){extra}")
                        rss[name].append(c.rss_kib())
                        log(f"round {rnd + 1} {name:6} peak RSS summed over 3 members "
                            f"{rss[name][-1] / 1024:.0f} MiB")
                    if per_round[rnd]:
                        failover_trials(c, per_round[rnd], a, log, trials[name])
                except Odd as e:
                    c.odd.append(str(e))
                    log(f"round {rnd + 1} {name}: ODD: {e}")
                finally:
                    c.stop()
                    if c.stop_failures:
                        c.odd.append(f"{', '.join(c.stop_failures)} did not stop within 20 s of SIGTERM")
                    if c.odd:
                        keep = True
                        odd[name] += [f"round {rnd + 1}: {x}" for x in c.odd]
                    if keep:
                        dest = c.keep_logs(os.path.join(logs_dir, f"{name}-round{rnd + 1}"))
                        log(f"round {rnd + 1} {name}: member logs kept in {dest}")
                    c.remove()
                    os.sync()
                    time.sleep(3)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    elapsed = time.monotonic() - t0
    names = [s for s, _ in servers]
    lines = [f"### {datetime.date.today()} — commit {commit}, {os.cpu_count()} cores, {disk}", "",
             f"`/usr/bin/python3 bench/cluster_side_by_side.py {' '.join(sys.argv[1:])}` "
             f"({elapsed / 60:.0f} min); 3 members, heartbeat {a.heartbeat_interval} ms, "
             f"election timeout {a.election_timeout} ms, snapshot count {a.snapshot_count}, pre-vote {a.pre_vote}; "
             f"medians of {a.rounds} alternating rounds.", ""]
    both = len(names) == 2
    if not a.skip_bench:
        head = "| workload (3 endpoints, 100 conns, 1000 clients) |"
        head += "".join(f" {s} req/s |" for s in names) + (" ratio |" if both else "")
        head += "".join(f" {s} p50 ms |" for s in names) + "".join(f" {s} p99 ms |" for s in names)
        lines += [head, "|" + " --- |" + " ---: |" * (head.count("|") - 2)]
        for wname, wargs in workloads:
            med = {s: {k: statistics.median(r[k] for r in bench[(wname, s)]) for k in ("rps", "p50", "p99")}
                   for s in names if bench[(wname, s)]}
            if len(med) != len(names):
                continue
            total = wargs[wargs.index("--total") + 1]
            row = f"| {wname} ({total} requests) |" + "".join(f" {med[s]['rps']:.0f} |" for s in names)
            if both:
                row += f" {med['etcdq']['rps'] / med['etcd']['rps']:.2f} |"
            row += "".join(f" {med[s]['p50'] * 1000:.2f} |" for s in names)
            row += "".join(f" {med[s]['p99'] * 1000:.2f} |" for s in names)
            lines.append(row)
        lines.append("")
        if all(rss[s] for s in names):
            m = {s: statistics.median(rss[s]) / 1024 for s in names}
            lines.append("Peak RSS summed over the 3 members after both runs (median): " +
                         ", ".join(f"{s} {m[s]:.0f} MiB" for s in names) +
                         (f" (ratio {m['etcdq'] / m['etcd']:.2f})." if both else "."))
            lines.append("")
    if any(trials[s] for s in names):
        lines += [f"Leader failover, SIGKILL of the leader under an open-loop writer (a Put every "
                  f"{a.writer_interval * 1000:.0f} ms round-robin over the live members, {a.writer_deadline:.0f} s "
                  f"deadline); election timeout {a.election_timeout} ms, heartbeat {a.heartbeat_interval} ms. "
                  f"Time from the kill to the first acknowledged Put sent after it (p90: nearest rank):", "",
                  "| server | trials | min ms | median ms | p90 ms | max ms | new leader seen, median ms "
                  "| Puts failed per trial, median | restarted member healthy, median s |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for s in names:
            ts = trials[s]
            w = [t["write_s"] * 1000 for t in ts if t["write_s"] is not None]
            e = [t["elected_s"] * 1000 for t in ts if t["elected_s"] is not None]
            never = len(ts) - len(w)
            if not w:
                lines.append(f"| {s} | {len(ts)} | - | - | - | - | - | - | - |")
                continue
            lines.append(f"| {s} | {len(w)}{f' (+{never} never)' if never else ''} | {min(w):.0f} | "
                         f"{statistics.median(w):.0f} | {nearest_rank(w, 90):.0f} | {max(w):.0f} | "
                         f"{statistics.median(e):.0f} | "
                         f"{statistics.median(t['failed_puts'] for t in ts):.0f} | "
                         f"{statistics.median(t['healthy_s'] for t in ts):.2f} |")
        lines.append("")
        for s in names:
            errors = {}
            for t in trials[s]:
                for e, n in t["errors"].items():
                    errors[e] = errors.get(e, 0) + n
            if errors:
                lines.append(f"Failed Puts, {s}, all trials (sent after the kill, before the first success): "
                             f"{errors_text(errors)[1:-1]}.")
        lines.append("")
    for s in names:
        for x in odd[s]:
            lines.append(f"- {s}, unexpected: {x}")
    if any(odd.values()):
        lines.append(f"  (member logs kept in {logs_dir})")
        lines.append("")
    lines += ["Every run, in order:", "", "```"] + runs + ["```", ""]
    table = "\n".join(lines)
    print("\n" + table)
    print(f"took {elapsed:.0f} s")
    if a.out:
        append_section(a.out, table)


if __name__ == "__main__":
    main()
