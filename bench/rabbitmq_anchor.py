#!/usr/bin/python3
"""RabbitMQ as the anchor for one synchronous queue worker (issue #37): a
quorum queue, one client that publishes with publisher confirms (waits for
the broker's ack, which a quorum queue gives once a majority of its members
wrote the message), waits for the delivery on its consumer (prefetch 1,
manual acks) and acks it. RabbitMQ's basic.ack has no answer, so the cycle
waits for two things a message (the confirm and the delivery) where
etcdq's and etcd's wait for three (produce, delivery, the ack's answer).

Bench only: RabbitMQ is not in scripts/setup.sh or CI. To install it
(Debian 12: RabbitMQ 3.10, Erlang 25, pika 1.2):

    apt-get install -y --no-install-recommends rabbitmq-server python3-pika

Debian's package starts no server where there is no init system (and
policy-rc.d may refuse it); RabbitCluster below starts its own nodes with
/usr/lib/rabbitmq/bin/rabbitmq-server, on free loopback ports, with their
data, logs, Erlang cookie and epmd port under one temporary directory, and
stops them (and that epmd) when done. On 3 nodes the queue's leader is on
the first node and the client on the second, as etcdq's and etcd's client
is on a follower.

    /usr/bin/python3 bench/rabbitmq_anchor.py [--nodes 1] [--seconds 5]
"""
import argparse, os, shutil, signal, subprocess, sys, tempfile, time, uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import side_by_side as sbs  # noqa: E402  (free_port)

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"


def available():
    """Why RabbitMQ cannot be measured here, or "" if it can."""
    if not os.path.exists(SERVER):
        return f"{SERVER} not found (apt-get install rabbitmq-server python3-pika)"
    try:
        import pika  # noqa: F401
    except ImportError:
        return "python3-pika not installed"
    return ""


def version():
    """The installed rabbitmq-server package's upstream version, e.g. 3.10.8."""
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"], capture_output=True, text=True)
    return r.stdout.split("-")[0] if r.returncode == 0 and r.stdout else "(version unknown)"


class RabbitCluster:
    def __init__(self, size, root):
        self.dir = tempfile.mkdtemp(prefix="rabbit-bench-", dir=root)
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)
        self.epmd_port = sbs.free_port()
        self.nodes = []
        for i in range(size):
            name = f"qcycle{i}_{os.getpid()}@localhost"
            self.nodes.append({"name": name, "amqp": sbs.free_port(), "dist": sbs.free_port(), "proc": None})
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        with open(os.path.join(self.dir, "rabbitmq.conf"), "w") as f:
            f.write("")

    def env(self, n):
        e = dict(os.environ)
        base = os.path.join(self.dir, n["name"].split("@")[0])
        e.update({
            "HOME": self.home, "RABBITMQ_NODENAME": n["name"], "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(n["amqp"]), "RABBITMQ_DIST_PORT": str(n["dist"]),
            "ERL_EPMD_PORT": str(self.epmd_port), "RABBITMQ_MNESIA_BASE": os.path.join(base, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(base, "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.dir, "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": os.path.join(self.dir, "rabbitmq")})
        return e

    def ctl(self, n, *args, timeout=90):
        return subprocess.run([CTL, "-n", n["name"], *args], env=self.env(n), capture_output=True, text=True,
                              timeout=timeout)

    def start(self, timeout=90):
        for n in self.nodes:
            log = open(os.path.join(self.dir, n["name"].split("@")[0] + ".out"), "ab")
            n["proc"] = subprocess.Popen([SERVER], env=self.env(n), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, process_group=0)
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            # await_startup gives up at once while the node is not up at all.
            while True:
                r = self.ctl(n, "await_startup", "--timeout", "30", timeout=60)
                if r.returncode == 0:
                    break
                if n["proc"].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"RabbitMQ node {n['name']} did not start: {r.stderr[-300:]}")
                time.sleep(0.5)
        for n in self.nodes[1:]:
            for args in (("stop_app",), ("join_cluster", self.nodes[0]["name"]), ("start_app",)):
                r = self.ctl(n, *args)
                if r.returncode != 0:
                    raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {n['name']}: {r.stderr[-300:]}")

    def client_port(self):
        """The AMQP port of the node the client uses: not the queue leader's when there are others."""
        return self.nodes[1 if len(self.nodes) > 1 else 0]["amqp"]

    def leader_port(self):
        return self.nodes[0]["amqp"]

    def stop(self):
        for n in self.nodes:
            if n["proc"] is not None and n["proc"].poll() is None:
                try:
                    os.killpg(n["proc"].pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for n in self.nodes:
            if n["proc"] is not None:
                try:
                    n["proc"].wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(n["proc"].pid, signal.SIGKILL)
                    n["proc"].wait()
        # The epmd the nodes started on our port (only ours: its port is ours).
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        subprocess.run([epmd, "-port", str(self.epmd_port), "-kill"], capture_output=True,
                       env={**os.environ, "ERL_EPMD_PORT": str(self.epmd_port)})
        shutil.rmtree(self.dir, ignore_errors=True)


def declare(port, name, members):
    import pika
    conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
    ch = conn.channel()
    ch.queue_declare(queue=name, durable=True,
                     arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": members})
    conn.close()


def cycles(cluster, seconds, payload):
    """Synchronous cycles a second, each cycle's duration (s), and per step (confirm, delivery after the
    confirm, ack sent) durations."""
    import pika
    name = f"cycle{uuid.uuid4().hex[:8]}"
    declare(cluster.leader_port(), name, len(cluster.nodes))
    conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=cluster.client_port()))
    try:
        pub = conn.channel()
        pub.confirm_delivery()
        con = conn.channel()
        con.basic_qos(prefetch_count=1)
        deliveries = con.consume(name, auto_ack=False, inactivity_timeout=10)
        props = pika.BasicProperties(delivery_mode=2)

        def one():
            t0 = time.perf_counter()
            # With confirms on, basic_publish returns once the broker confirmed
            # (raises if it nacked or returned the message).
            pub.basic_publish(exchange="", routing_key=name, body=payload, properties=props, mandatory=True)
            t1 = time.perf_counter()
            method, _, _ = next(deliveries)
            if method is None:
                raise RuntimeError("RabbitMQ: no delivery within 10 s")
            t2 = time.perf_counter()
            con.basic_ack(method.delivery_tag)
            t3 = time.perf_counter()
            return t0, t1, t2, t3

        for _ in range(20):
            one()
        durations, steps = [], []
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            t0, t1, t2, t3 = one()
            durations.append(t3 - t0)
            steps.append((t1 - t0, t2 - t1, t3 - t2))
        elapsed = time.perf_counter() - start
        con.cancel()
    finally:
        conn.close()
    return len(durations) / elapsed, durations, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--payload", type=int, default=256)
    args = ap.parse_args()
    why = available()
    if why:
        print("RabbitMQ:", why)
        return 2
    c = RabbitCluster(args.nodes, os.environ.get("BENCH_DIR", "/var/tmp"))
    try:
        c.start()
        rate, durs, steps = cycles(c, args.seconds, b"x" * args.payload)
    finally:
        c.stop()
    durs.sort()
    print(f"{args.nodes} node(s): {rate:.0f} cycles/s, p50 {durs[len(durs) // 2] * 1000:.2f} ms, "
          f"p99 {durs[int(len(durs) * 0.99)] * 1000:.2f} ms")
    for j, what in enumerate(("publish confirmed", "delivery after the confirm", "ack sent")):
        xs = sorted(s[j] for s in steps)
        print(f"    {what}: p50 {xs[len(xs) // 2] * 1000:.2f} ms p99 {xs[int(len(xs) * 0.99)] * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
