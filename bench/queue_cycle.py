#!/usr/bin/python3
"""One synchronous queue worker against etcdq, beside the same loop on plain
keys against etcd 3.6, in one run (issue #37 item 1).

    /usr/bin/python3 bench/queue_cycle.py [--sizes 1,3] [--seconds 5] [--rounds 3] [--rate 1000] [--client python|go] [--out bench/RESULTS.md]

The cycle, one client, nothing in flight but the step it waits for:
  etcdq  Put /q/{queue}/p/m{i} (produce), wait for the delivery on the
         consumer's Watch /q/{queue}/c/{uuid}, Delete the delivered key (ack);
  etcd   Put /cycle/m{i}, wait for its PUT event on a Watch of /cycle/,
         Delete it (and its DELETE event, which the watch also carries).
Both use the same Python gRPC stubs (python-etcd3's etcdrpc), the same
payload (--payload bytes) and one channel for the unary calls and the watch;
--client go runs the same loop through Go's clientv3 instead
(tests/go/benchtools/queuecycle, built with the pinned tests/go/go.sum).
On 3 members the client talks to a FOLLOWER only (found with
Maintenance.Status), as two clients in three do.

Then on 3 members only (--rate, default 1,000 messages/s): an open-loop
producer (a Put every 1/rate s, never waiting for earlier ones) and a consumer
that acks every delivery at once, both on a follower, for --seconds, with
bench/etcdq_queue_bench --rate (C++, so the client is not what limits);
reported is produce (Put sent) to delivery (event received) p50/p99/max, and
the same for put to watch event on etcd's plain keys (--plain).

With RabbitMQ installed (bench only, not in setup or CI: `apt-get install
rabbitmq-server python3-pika`; bench/rabbitmq_anchor.py), each round also
runs the same worker on a RabbitMQ quorum queue (publish with confirms, the
delivery on a prefetch-1 consumer, manual ack) on as many nodes, the client
on a node that does not lead the queue; --no-rabbitmq leaves it out.

Clusters are fresh per size and server (bench/cluster_side_by_side.py's
Cluster: loopback, free ports, data dirs under $BENCH_DIR or /var/tmp,
etcd's default heartbeat 100 ms / election 1000 ms). Rounds alternate the
servers (etcd, etcdq, etcd, ...) on the same clusters; medians are reported
with every round's value. --out appends a markdown section (date, commit,
cores, load average, disk) under "## Queue latency (one synchronous worker)".
"""
import argparse, datetime, json, math, os, queue, statistics, subprocess, sys, threading, time, uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import cluster_side_by_side as csbs  # noqa: E402

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

SECTION = "## Queue latency (one synchronous worker)"
INTRO = ("`/usr/bin/python3 bench/queue_cycle.py` (issue #37): one client runs produce → delivery on its "
         "consumer watch → ack (etcdq queue) against put → watch event → delete (etcd 3.6.17, plain keys), one "
         "step at a time; on 3 members the client is on a follower. Then an open-loop 1,000 messages/s "
         "producer and an acking consumer on a follower: produce→delivery (etcdq) against put→event (etcd). "
         "Client (Python gRPC, or Go's clientv3 with `--client go`) and servers share the machine's cores.\n")


def default_etcd36():
    try:
        import harness
        return harness.ORACLE
    except Exception:  # noqa: BLE001
        return ""


class Watcher:
    """One Watch stream; every event (with its receive time) goes to `events`."""

    def __init__(self, channel, key, prefix):
        self.events = queue.Queue()
        self.requests = queue.Queue()
        end = (key[:-1] + bytes([key[-1] + 1])) if prefix else b""
        self.requests.put(rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=key, range_end=end)))
        self.call = rpc_pb2_grpc.WatchStub(channel).Watch(iter(self.requests.get, None))
        self.created = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        if not self.created.wait(10):
            raise csbs.Odd("watch not created within 10 s")

    def run(self):
        try:
            for r in self.call:
                if r.created:
                    self.created.set()
                if r.canceled:
                    self.events.put(("canceled", r.cancel_reason, time.perf_counter()))
                    return
                now = time.perf_counter()
                for ev in r.events:
                    self.events.put((ev.type, ev.kv.key, now))
        except grpc.RpcError:
            pass

    def close(self):
        self.requests.put(None)
        self.call.cancel()


def is_put(t):
    return t == 0  # mvccpb.Event.PUT


class Client:
    def __init__(self, endpoint):
        self.channel = grpc.insecure_channel(endpoint)
        self.kv = rpc_pb2_grpc.KVStub(self.channel)

    def close(self):
        self.channel.close()


def next_put(w, timeout=10.0):
    deadline = time.perf_counter() + timeout
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise csbs.Odd(f"no delivery within {timeout} s")
        try:
            t, key, at = w.events.get(timeout=left)
        except queue.Empty:
            continue
        if t == "canceled":
            raise csbs.Odd(f"watch canceled: {key}")
        if is_put(t):
            return key, at


def cycles(endpoint, is_queue, seconds, payload):
    """Synchronous cycles a second and each cycle's duration (s)."""
    c = Client(endpoint)
    tag = uuid.uuid4().hex[:8]
    if is_queue:
        qname = f"cycle{tag}"
        w = Watcher(c.channel, f"/q/{qname}/c/{uuid.uuid4()}".encode(), prefix=False)
        put_key = lambda i: f"/q/{qname}/p/m{i}".encode()  # noqa: E731
    else:
        w = Watcher(c.channel, f"/cycle{tag}/".encode(), prefix=True)
        put_key = lambda i: f"/cycle{tag}/m{i}".encode()  # noqa: E731
    durations = []
    steps = []  # (put answered, event after the answer, delete answered), s
    try:
        # A few cycles to warm the channel and the server.
        i = 0
        for _ in range(20):
            c.kv.Put(rpc_pb2.PutRequest(key=put_key(i), value=payload), timeout=10)
            key, _ = next_put(w)
            c.kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=key), timeout=10)
            i += 1
        start = time.perf_counter()
        end = start + seconds
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                break
            c.kv.Put(rpc_pb2.PutRequest(key=put_key(i), value=payload), timeout=10)
            t1 = time.perf_counter()
            key, t2 = next_put(w)
            t2 = max(t2, t1)
            c.kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=key), timeout=10)
            t3 = time.perf_counter()
            durations.append(t3 - t0)
            steps.append((t1 - t0, t2 - t1, t3 - t2))
            i += 1
        elapsed = time.perf_counter() - start
    finally:
        w.close()
        c.close()
    if os.environ.get("QUEUE_CYCLE_STEPS"):
        for j, what in enumerate(("put answered", "event after answer", "delete answered")):
            xs = [st[j] for st in steps]
            print(f"    {what}: p50 {pct(xs, 50) * 1000:.2f} ms p99 {pct(xs, 99) * 1000:.2f} ms", flush=True)
    return len(durations) / elapsed, durations


def go_tool():
    """Builds the Go twin of cycles() (tests/go/benchtools/queuecycle, clientv3 pinned by tests/go/go.sum)."""
    out = os.path.join(os.path.expanduser("~"), ".cache", "etcdq", "bin", "queuecycle-go")
    subprocess.run(["go", "build", "-o", out, "./benchtools/queuecycle"], cwd=os.path.join(ROOT, "tests", "go"),
                   check=True, env=dict(os.environ, GOFLAGS="-mod=readonly"))
    return out


def cycles_go(tool, endpoint, is_queue, seconds, payload):
    """cycles() through Go's clientv3: the same loop with a client whose own cost is small."""
    cmd = [tool, "-endpoint", endpoint, "-seconds", str(seconds), "-payload", str(len(payload)), "-durations"]
    if is_queue:
        cmd.append("-queue")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if p.returncode != 0:
        raise csbs.Odd(f"queuecycle exit {p.returncode}: {p.stderr.strip()}")
    res = json.loads(p.stdout)
    if os.environ.get("QUEUE_CYCLE_STEPS"):
        print(f"    put answered p50 {res['put_p50_ms']:.2f} ms, event after answer p50 {res['event_p50_ms']:.2f} ms, "
              f"delete answered p50 {res['delete_p50_ms']:.2f} ms", flush=True)
    return res["cycles_per_s"], [us / 1e6 for us in res["durations_us"]]


def open_loop(tool, endpoint, is_queue, seconds, rate, payload_size):
    """etcdq_queue_bench --rate: produce→delivery (or put→event) delays at `rate` Puts a second, each
    delivery acked (deleted) at once; its JSON."""
    import json, subprocess, tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        cmd = [tool, "--endpoints", endpoint, "--messages", str(int(seconds * rate)), "--consumers", "1",
               "--rate", str(rate), "--value-size", str(payload_size), "--timeout", "120", "--json", j.name]
        if not is_queue:
            cmd.append("--plain")
        r = subprocess.run(cmd, capture_output=True, text=True)
        try:
            res = json.load(open(j.name))
        except (OSError, ValueError):
            res = {}
        res["exit"] = r.returncode
        if r.returncode != 0:
            res["stderr"] = r.stderr[-500:]
        return res


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)] if xs else float("nan")


def follower_endpoint(cluster):
    i, _ = cluster.leader()
    for j, m in enumerate(cluster.members):
        if j != i:
            return m.endpoint
    return cluster.members[i].endpoint


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--etcd", default=default_etcd36(), help="etcd 3.6 binary")
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "bench", "etcdq_queue_bench"))
    ap.add_argument("--sizes", default="1,3")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=1000, help="open-loop produce rate on 3 members; 0: skip")
    ap.add_argument("--payload", type=int, default=256)
    ap.add_argument("--out")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--no-rabbitmq", action="store_true", help="leave out the RabbitMQ anchor")
    ap.add_argument("--client", choices=("python", "go"), default="python",
                    help="the synchronous worker: Python gRPC (python-etcd3's stubs) or Go's clientv3")
    args = ap.parse_args()
    cycle_fn = cycles
    if args.client == "go":
        tool = go_tool()
        cycle_fn = lambda *a: cycles_go(tool, *a)  # noqa: E731
    import rabbitmq_anchor
    rabbit_why = "left out (--no-rabbitmq)" if args.no_rabbitmq else rabbitmq_anchor.available()
    if rabbit_why:
        print("RabbitMQ anchor:", rabbit_why, flush=True)
    payload = b"x" * args.payload
    root = os.environ.get("BENCH_DIR", "/var/tmp")
    servers = [("etcd 3.6", args.etcd, False), ("etcdq", args.etcdq, True)]
    results = {"cycle": {}, "open_loop": {}, "rabbitmq": {}}
    problems = []
    loads = []
    for size in [int(s) for s in args.sizes.split(",")]:
        clusters = {}
        rabbit = None
        try:
            for name, binary, _ in servers:
                c = csbs.Cluster(f"qcycle-{'q' if name == 'etcdq' else 'e'}{size}", binary, root, 100, 1000,
                                 100000, size=size)
                clusters[name] = c
                c.start()
            rabbit = None
            if not rabbit_why:
                rabbit = rabbitmq_anchor.RabbitCluster(size, root)
                try:
                    rabbit.start()
                except Exception as e:  # noqa: BLE001
                    problems.append(f"RabbitMQ on {size} node(s): {e}")
                    rabbit.stop()
                    rabbit = None
            rates = {name: [] for name, _, _ in servers}
            per_cycle = {name: [] for name, _, _ in servers}
            r_rates, r_durs = [], []
            for r in range(args.rounds):
                if rabbit is not None:
                    rate, durs, steps = rabbitmq_anchor.cycles(rabbit, args.seconds, payload)
                    r_rates.append(rate)
                    r_durs.extend(durs)
                    loads.append(os.getloadavg()[0])
                    if os.environ.get("QUEUE_CYCLE_STEPS"):
                        for j, what in enumerate(("publish confirmed", "delivery after confirm", "ack sent")):
                            xs = [st[j] for st in steps]
                            print(f"    {what}: p50 {pct(xs, 50) * 1000:.2f} ms p99 {pct(xs, 99) * 1000:.2f} ms",
                                  flush=True)
                    print(f"{size} member(s), round {r + 1}, RabbitMQ quorum queue: {rate:.0f} cycles/s "
                          f"(p50 {pct(durs, 50) * 1000:.2f} ms, p99 {pct(durs, 99) * 1000:.2f} ms)", flush=True)
                for name, _, is_q in servers:
                    ep = follower_endpoint(clusters[name]) if size > 1 else clusters[name].members[0].endpoint
                    rate, durs = cycle_fn(ep, is_q, args.seconds, payload)
                    rates[name].append(rate)
                    per_cycle[name].extend(durs)
                    loads.append(os.getloadavg()[0])
                    print(f"{size} member(s), round {r + 1}, {name}: {rate:.0f} cycles/s "
                          f"(p50 {pct(durs, 50) * 1000:.2f} ms, p99 {pct(durs, 99) * 1000:.2f} ms)", flush=True)
            results["cycle"][size] = {
                name: {"rates": rates[name], "median": statistics.median(rates[name]),
                       "p50_ms": pct(per_cycle[name], 50) * 1000, "p99_ms": pct(per_cycle[name], 99) * 1000}
                for name, _, _ in servers}
            if rabbit is not None:
                # Its Erlang schedulers spin: not beside the open loop.
                rabbit.stop()
                rabbit = None
            if r_rates:
                results["rabbitmq"][size] = {"rates": r_rates, "median": statistics.median(r_rates),
                                             "p50_ms": pct(r_durs, 50) * 1000, "p99_ms": pct(r_durs, 99) * 1000}
            if size > 1 and args.rate > 0:
                for name, _, is_q in servers:
                    ep = follower_endpoint(clusters[name])
                    res = open_loop(args.tool, ep, is_q, args.seconds, args.rate, args.payload)
                    loads.append(os.getloadavg()[0])
                    d = res.get("delay_ms", {})
                    results["open_loop"].setdefault(size, {})[name] = {
                        "p50_ms": d.get("p50", float("nan")), "p99_ms": d.get("p99", float("nan")),
                        "max_ms": d.get("max", float("nan")), "sent": int(args.seconds * args.rate),
                        "acked_per_s": res.get("acked_per_s"), "missing": res.get("missing"),
                        "errors": res.get("errors"), "redelivered": res.get("redelivered")}
                    print(f"{size} members, {args.rate}/s open loop, {name}: p50 {d.get('p50')} ms, "
                          f"p99 {d.get('p99')} ms, max {d.get('max')} ms, missing {res.get('missing')}, "
                          f"errors {res.get('errors')}", flush=True)
                    if res["exit"] != 0:
                        problems.append(f"{name} {size} members open loop: exit {res['exit']}: "
                                        f"{res.get('stderr', '')}")
            for c in clusters.values():
                c.check_alive("after the runs")
        except csbs.Odd as e:
            problems.append(f"{size} member(s): {e}")
            print("problem:", e, flush=True)
        finally:
            for c in clusters.values():
                c.stop()
                c.remove()
            if rabbit is not None:
                rabbit.stop()
    lines = ["| members (client on) | etcd 3.6 put→event→delete cycles/s | etcdq produce→delivery→ack cycles/s | "
             "etcdq / etcd | cycle p50 / p99 ms (etcd; etcdq) |", "| --- | --- | --- | --- | --- |"]
    for size, by in results["cycle"].items():
        e, q = by["etcd 3.6"], by["etcdq"]
        lines.append(
            f"| {size} ({'follower' if size > 1 else 'the member'}) | {e['median']:.0f} "
            f"({', '.join(f'{x:.0f}' for x in e['rates'])}) | {q['median']:.0f} "
            f"({', '.join(f'{x:.0f}' for x in q['rates'])}) | {q['median'] / e['median']:.2f}× | "
            f"{e['p50_ms']:.2f} / {e['p99_ms']:.2f}; {q['p50_ms']:.2f} / {q['p99_ms']:.2f} |")
    if results["rabbitmq"]:
        lines.append("")
        lines.append("The anchor in the same rounds, one synchronous worker on a RabbitMQ "
                     f"{rabbitmq_anchor.version()} quorum queue (publish confirmed → delivery → ack; "
                     "RabbitMQ does not answer an ack); on 3 nodes the client is on one that does not lead the "
                     "queue:")
        lines.append("")
        lines.append("| nodes | RabbitMQ cycles/s | cycle p50 / p99 ms | etcdq / RabbitMQ |")
        lines.append("| --- | --- | --- | --- |")
        for size, rq in results["rabbitmq"].items():
            q = results["cycle"].get(size, {}).get("etcdq")
            ratio = f"{q['median'] / rq['median']:.2f}×" if q else ""
            lines.append(f"| {size} | {rq['median']:.0f} ({', '.join(f'{x:.0f}' for x in rq['rates'])}) | "
                         f"{rq['p50_ms']:.2f} / {rq['p99_ms']:.2f} | {ratio} |")
    for size, by in results["open_loop"].items():
        lines.append("")
        lines.append(f"{args.rate} messages/s open loop on {size} members, producer and consumer on a follower:")
        lines.append("")
        lines.append("| server | messages | produce→delivery (etcd: put→event) p50 ms | p99 ms | max ms | "
                     "missing | errors |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for name, o in by.items():
            lines.append(f"| {name} | {o['sent']} | {o['p50_ms']:.2f} | {o['p99_ms']:.2f} | {o['max_ms']:.2f} | "
                         f"{o['missing']} | {o['errors']} |")
    table = "\n".join(lines)
    print(table)
    for p in problems:
        print("PROBLEM:", p)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "problems": problems}, f, default=str)
    if args.out:
        load = f"load average during the runs {min(loads):.1f}–{max(loads):.1f}" if loads else ""
        head = (f"### {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, commit {csbs.commit_line()}, "
                f"{os.cpu_count()} cores, {load}, {args.rounds} rounds of {args.seconds:g} s, payload "
                f"{args.payload} B, client {'Go clientv3' if args.client == 'go' else 'Python gRPC'}; "
                f"{csbs.disk_line(root)}")
        csbs.append_section(args.out, head + "\n\n" + table, section=SECTION, intro=INTRO)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
