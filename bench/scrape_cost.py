#!/usr/bin/python3
"""The cost of one /metrics scrape on a loaded member: starts etcdq on free
loopback ports, writes --keys keys and one message to each of --queues
queues, then times --scrapes GETs of /metrics (median and max, ms) and
prints the body's size.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 bench/scrape_cost.py [--keys 10000] [--queues 100]
"""
import argparse, os, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
import etcd3  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--queues", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=50)
    a = ap.parse_args()
    binary = os.environ.get("ETCDQ_BIN", "build/etcdq")
    d = tempfile.mkdtemp(prefix="etcdq-scrape-")
    cp, pp = free_port(), free_port()
    proc = subprocess.Popen([binary, "--data-dir", d + "/data", "--listen-client-urls", "http://127.0.0.1:%d" % cp,
                             "--advertise-client-urls", "http://127.0.0.1:%d" % cp,
                             "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
                             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
                             "--initial-cluster", "default=http://127.0.0.1:%d" % pp],
                            stdout=subprocess.DEVNULL, stderr=open(d + "/log", "w"))
    try:
        url = "http://127.0.0.1:%d/metrics" % cp
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                time.sleep(0.1)
        c = etcd3.client(host="127.0.0.1", port=cp)
        for i in range(a.keys):
            c.put("key-%06d" % i, "v" * 64)
        for q in range(a.queues):
            c.put("/q/queue-%03d/p/m" % q, "msg")
        times, size = [], 0
        for _ in range(a.scrapes):
            t = time.perf_counter()
            size = len(urllib.request.urlopen(url, timeout=10).read())
            times.append((time.perf_counter() - t) * 1000)
        print("keys=%d queues=%d scrapes=%d: median %.2f ms, max %.2f ms, body %d bytes"
              % (a.keys, a.queues, a.scrapes, statistics.median(times), max(times), size))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
