"""Work-queue throughput of etcdq (QUEUES.md), end to end through etcd's API:
produce (Put), deliver (Watch), ack (Delete), with bench/etcdq_queue_bench.

    /usr/bin/python3 bench/queue_throughput.py [--messages 100000] [--consumers 1,4,16] [--batches 1/1,16/128]
                                               [--out bench/RESULTS.md]

For each cluster size (1 member, then 3), starts a fresh etcdq cluster on
loopback (bench/cluster_side_by_side.py's Cluster: free ports, data dirs in
$BENCH_DIR or /var/tmp, etcd's default timings), then for each consumer count
runs etcdq_queue_bench on a new queue: --messages Puts of 256-byte payloads
with 256 requests in flight, spread over every member; the consumers' watches
spread over every member too; each delivered message acked by a Delete. Each
--batches item P/A is one run per consumer count: 1/1 is a Put per message
and a Delete per ack; 16/128 puts 16 messages with one Txn and acks with one
Txn of up to 128 Deletes per consumer at a time (etcdq_queue_bench's
--produce-batch and --ack-batch), as a client moving many messages would. Reported per
run: messages/s produced, delivered (first deliveries) and acked end to end,
the produce-to-delivery delay p50/p99, redeliveries, and whether every
message arrived. etcd has no queues, so there is no etcd column.

--out appends a markdown table (date, commit, cores, load average, disk)
under "## Queues" in that file.
"""
import argparse, datetime, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cluster_side_by_side as csbs  # noqa: E402

SECTION = "## Queues"
INTRO = ("End-to-end work-queue throughput (`bench/queue_throughput.py`, `etcdq_queue_bench`): Puts to "
         "`/q/{queue}/p/…` (256 B, 256 in flight), consumers on Watch, each message acked by a Delete. "
         "Batches P/A: P messages a produce request (a Txn of Puts when P > 1), acks in Txns of up to A Deletes. "
         "etcd has no queues. Load generator and servers share the machine's cores.")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "bench", "etcdq_queue_bench"))
    ap.add_argument("--messages", type=int, default=100000)
    ap.add_argument("--consumers", default="1,4,16")
    ap.add_argument("--sizes", default="1,3", help="cluster sizes")
    ap.add_argument("--batches", default="1/1,16/128",
                    help="comma-separated produce/ack batch sizes (messages a request)")
    ap.add_argument("--out")
    args = ap.parse_args()
    root = os.environ.get("BENCH_DIR", "/var/tmp")
    rows = []
    problems = []
    for size in [int(s) for s in args.sizes.split(",")]:
        c = csbs.Cluster(f"queue{size}", args.etcdq, root, 100, 1000, 100000, size=size)
        try:
            c.start()
            eps = ",".join(m.endpoint for m in c.members)
            for batch in args.batches.split(","):
                pb, ab = (int(x) for x in batch.split("/"))
                for n in [int(x) for x in args.consumers.split(",")]:
                    with tempfile.NamedTemporaryFile(suffix=".json") as j:
                        cmd = [args.tool, "--endpoints", eps, "--messages", str(args.messages), "--consumers",
                               str(n), "--produce-batch", str(pb), "--ack-batch", str(ab), "--json", j.name,
                               "--timeout", "600"]
                        r = subprocess.run(cmd, capture_output=True, text=True)
                        what = f"{size} member(s), {n} consumer(s), batches {pb}/{ab}"
                        print(f"{what}:\n{r.stdout}", flush=True)
                        if r.returncode != 0:
                            problems.append(f"{what}: exit {r.returncode}: {r.stderr[-500:]}")
                        try:
                            res = json.load(open(j.name))
                        except (OSError, ValueError):
                            continue
                        rows.append((size, n, f"{pb}/{ab}", res))
            c.check_alive("after the queue runs")
        except csbs.Odd as e:
            problems.append(str(e))
        finally:
            c.stop()
            c.remove()
    lines = ["| members | consumers | batches (produce/ack) | produced msg/s | delivered msg/s | acked msg/s (end to end) "
             "| delay p50 ms | delay p99 ms | redelivered | missing |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size, n, batch, r in rows:
        lines.append(f"| {size} | {n} | {batch} | {r['produced_per_s']:.0f} | {r['delivered_per_s']:.0f} | "
                     f"{r['acked_per_s']:.0f} | {r['delay_ms']['p50']:.1f} | {r['delay_ms']['p99']:.1f} | "
                     f"{r['redelivered']} | {r['missing']} |")
    table = "\n".join(lines)
    print(table)
    for p in problems:
        print("problem:", p)
    if args.out:
        head = (f"### {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
                f"{csbs.commit_line()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end, "
                f"{csbs.disk_line(root)}; {args.messages} messages a run")
        csbs.append_section(args.out, head + "\n\n" + table + ("\n\n" + "\n".join("- " + p for p in problems)
                                                          if problems else ""), SECTION, INTRO + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
