#!/usr/bin/python3
"""Runs etcd's own load generator against Debian's etcd 3.4 and etcdq, each a
single fresh member on loopback with its data dir on the same disk, with the
same workloads, alternating A B A B, and prints one table (medians).

    bench/side_by_side.py [--etcdq build/etcdq] [--rounds 2] [--out bench/RESULTS.md]

Needs: ../shared/tools/etcd-benchmark.sh (builds `benchmark`), etcd-server.
The etcdq run also reports how many writes one log entry carried (from its
shutdown log), and, with --count-fsyncs, a separate run under strace counts
durable writes per put (not timed: strace slows the server).
"""
import argparse, datetime, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

WORKLOADS = [
    ("put 1 client", ["--conns", "1", "--clients", "1", "put", "--key-size", "8", "--sequential-keys",
                      "--val-size", "256", "--total", "2000"]),
    ("put 1000 clients", ["--conns", "100", "--clients", "1000", "put", "--key-size", "8",
                          "--sequential-keys", "--val-size", "256", "--total", "50000"]),
    ("range l 1000 clients", ["--conns", "100", "--clients", "1000", "range", "foo",
                              "--consistency", "l", "--total", "50000"]),
    ("range s 1000 clients", ["--conns", "100", "--clients", "1000", "range", "foo",
                              "--consistency", "s", "--total", "50000"]),
]


def proc_status_kib(pid, field):
    """A KiB figure of /proc/<pid>/status (VmHWM, VmRSS, ...); 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_kib(pid):
    """The process's peak resident set (VmHWM), KiB; 0 once it is gone."""
    return proc_status_kib(pid, "VmHWM")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, binary, label, wrapper=()):
        self.dir = tempfile.mkdtemp(prefix=f"bench-{label}-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
        c, p = free_port(), free_port()
        self.url = f"http://127.0.0.1:{c}"
        purl = f"http://127.0.0.1:{p}"
        self.log_path = os.path.join(self.dir, "server.log")
        self.log = open(self.log_path, "w")
        args = list(wrapper) + [binary, "--name", "default", "--data-dir", os.path.join(self.dir, "data"),
                                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                                "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                                "--initial-cluster", f"default={purl}"]
        # Its own process group (to stop it whole) but not its own session:
        # with the kernel's autogroup scheduling a new session would get a
        # fixed half of the CPU against the load generator's half, whatever
        # the server's design. In one session the scheduler shares the two
        # cores by thread, as when both are started from one shell.
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, process_group=0)
        deadline = time.time() + 30
        while time.time() < deadline:
            r = subprocess.run(["etcdctl", "--endpoints", self.url, "put", "foo", "bar"], capture_output=True)
            if r.returncode == 0:
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{label} did not start; log {self.log_path}")

    def rss_kib(self):
        return peak_rss_kib(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        with open(self.log_path) as f:
            self.log_text = f.read()
        shutil.rmtree(self.dir, ignore_errors=True)


def benchmark_tool():
    """Path of etcd's `benchmark` (built by ../shared/tools/etcd-benchmark.sh if missing)."""
    return subprocess.run(["bash", os.path.join(SHARED, "tools", "etcd-benchmark.sh")],
                          capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]


def benchmark_output(tool, endpoints, args, timeout=600):
    """Runs the tool against endpoints ("host:port[,host:port...]"; http:// is dropped) and
    returns its report."""
    # Output to a file, not a pipe: reading the tool's progress bar through a
    # pipe cost enough CPU on 2 cores to skew results by a third.
    with tempfile.TemporaryFile(mode="w+") as f:
        subprocess.run([tool, "--endpoints", endpoints.replace("http://", "")] + args,
                       stdout=f, stderr=subprocess.DEVNULL, timeout=timeout)
        f.seek(0)
        return f.read()


def parse_benchmark(out):
    """The report's figures: rps, avg, p50, p90, p99 (seconds), total (s), errors {message: count}."""
    def pct(p):
        m = re.search(r"\b%s%% in ([\d.]+) secs" % p, out)
        return float(m.group(1)) if m else float("nan")
    errors = {}
    if "Error distribution:" in out:
        for m in re.finditer(r"^\s+\[(\d+)\]\s+(.*)$", out.split("Error distribution:", 1)[1], re.M):
            errors[m.group(2)] = int(m.group(1))
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "avg": float(re.search(r"Average:\s+([\d.]+)", out).group(1)),
            "total": float(re.search(r"Total:\s+([\d.]+)", out).group(1)),
            "p50": pct(50), "p90": pct(90), "p99": pct(99), "errors": errors}


def run_benchmark(tool, url, args):
    r = parse_benchmark(benchmark_output(tool, url, args))
    return r["rps"], r["avg"], r["p99"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None, help="append the table to this markdown file")
    ap.add_argument("--count-fsyncs", action="store_true")
    a = ap.parse_args()
    tool = benchmark_tool()
    servers = [("etcd", a.etcd), ("etcdq", a.etcdq)]
    results = {(w, s): [] for w, _ in WORKLOADS for s, _ in servers}
    rss = {s: [] for s, _ in servers}
    batching = []
    for rnd in range(a.rounds):
        for name, binary in servers:  # A B A B: each round runs both
            srv = Server(binary, name)
            try:
                for wname, wargs in WORKLOADS:
                    r = run_benchmark(tool, srv.url, wargs)
                    results[(wname, name)].append(r)
                    print(f"round {rnd + 1} {name:6} {wname:22} {r[0]:10.0f} req/s  avg {r[1] * 1000:7.2f} ms"
                          f"  p99 {r[2] * 1000:7.2f} ms", flush=True)
                rss[name].append(srv.rss_kib())
            finally:
                srv.stop()
                # Let the disk settle (the stopped server's files are being
                # written back and removed) so the next server starts even.
                os.sync()
                time.sleep(3)
            m = re.search(r"commands proposed: (\d+) in (\d+) log entries", getattr(srv, "log_text", ""))
            if m:
                batching.append((int(m.group(1)), int(m.group(2))))
    fsync_line = ""
    if a.count_fsyncs and shutil.which("strace"):
        srv = Server(a.etcdq, "etcdq-strace", wrapper=["strace", "-f", "-c", "-e",
                                                        "trace=fdatasync,fsync,io_submit",
                                                        "-o", "/tmp/etcdq-fsyncs.txt"])
        try:
            run_benchmark(tool, srv.url, WORKLOADS[1][1])
        finally:
            srv.stop()
        calls = 0
        for line in open("/tmp/etcdq-fsyncs.txt"):
            f = line.split()
            # libraft writes its log with O_DSYNC through io_submit: each
            # submission is one durable write.
            if len(f) >= 5 and f[-1] in ("fdatasync", "fsync", "io_submit"):
                calls += int(f[3])
        fsync_line = (f"Under strace (not timed), the 1000-client put run made {calls} durable writes "
                      f"(io_submit of the O_DSYNC Raft log, fsync, fdatasync) for 50000 puts: "
                      f"{50000 / max(calls, 1):.1f} puts per durable write.")

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"### {datetime.date.today()} — commit {commit}, {os.cpu_count()} cores, "
             f"medians of {a.rounds} alternating rounds", "",
             "| workload | etcd req/s | etcdq req/s | ratio | etcd avg ms | etcdq avg ms | etcd p99 ms | etcdq p99 ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for wname, _ in WORKLOADS:
        e = [statistics.median(x) for x in zip(*results[(wname, "etcd")])]
        q = [statistics.median(x) for x in zip(*results[(wname, "etcdq")])]
        lines.append(f"| {wname} | {e[0]:.0f} | {q[0]:.0f} | {q[0] / e[0]:.2f} | {e[1] * 1000:.2f} | "
                     f"{q[1] * 1000:.2f} | {e[2] * 1000:.2f} | {q[2] * 1000:.2f} |")
    lines.append("")
    lines.append(f"Peak RSS over the run (median): etcd {statistics.median(rss['etcd']) / 1024:.0f} MiB, "
                 f"etcdq {statistics.median(rss['etcdq']) / 1024:.0f} MiB.")
    if batching:
        cmds = sum(c for c, _ in batching)
        ents = sum(e for _, e in batching)
        lines.append(f"etcdq packed {cmds} writes into {ents} log entries ({cmds / max(ents, 1):.1f} per entry) "
                     f"over all its runs (1-client puts included).")
    if fsync_line:
        lines.append(fsync_line)
    lines.append("")
    table = "\n".join(lines)
    print("\n" + table)
    if a.out:
        with open(a.out, "a") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
