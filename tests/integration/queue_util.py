"""Helpers for the work-queue tests (test_queue_*.py, tests/cluster/test_queue_*.py):
an `etcdctl watch` subprocess whose events are parsed as they arrive, and the
key helpers of QUEUES.md.
"""
import json
import os
import queue as pyqueue
import subprocess
import threading
import time
import uuid

import grpc
from etcd3 import events as etcd3_events
from etcd3.etcdrpc import rpc_pb2

import harness

ETCDCTL = harness.ETCDCTL
IDX_DIGITS = 20
MALFORMED = "etcdq: malformed queue key"
BAD_CONFIG = "etcdq: invalid queue config"


def wait_until(pred, timeout, step=0.1):
    """Polls pred() every `step` s until it is true or `timeout` s passed; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def msg_key(queue, idx, tail):
    """The key a message is stored (and delivered) at: /q/{queue}/{idx, 20 digits}/{tail}."""
    if isinstance(queue, bytes):
        queue = queue.decode(errors="surrogateescape")
    if isinstance(tail, bytes):
        tail = tail.decode(errors="surrogateescape")
    return "/q/%s/%0*d/%s" % (queue, IDX_DIGITS, idx, tail)


def parse_msg_key(key):
    """(queue, idx, tail) of a delivered message key (str or bytes), or None."""
    if isinstance(key, bytes):
        key = key.decode(errors="surrogateescape")
    parts = key.split("/", 4)
    if len(parts) < 5 or parts[0] != "" or parts[1] != "q":
        return None
    _, _, queue, idx, tail = parts
    if len(idx) != IDX_DIGITS or not idx.isdigit():
        return None
    return queue, int(idx), tail


def ctl_env():
    return dict(os.environ, ETCDCTL_API="3")


def etcdctl(endpoints, *args, timeout=30, input=None):
    """Runs etcdctl; returns the CompletedProcess (text)."""
    return subprocess.run([ETCDCTL, "--endpoints", endpoints, "--dial-timeout", "3s",
                           "--command-timeout", "10s"] + list(args),
                          env=ctl_env(), capture_output=True, text=True, timeout=timeout, input=input)


class CtlWatch:
    """`etcdctl watch ARGS...` running in the background. Its plain output, one
    event as three lines (type, key, value), is parsed into self.events:
    (monotonic time, type, key, value). Values must be one line."""

    def __init__(self, endpoints, *args):
        self.args = [ETCDCTL, "--endpoints", endpoints, "watch"] + list(args)
        self.proc = subprocess.Popen(self.args, env=ctl_env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.events = []
        self.lines = []
        self.cond = threading.Condition()
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read(self):
        pending = []
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            with self.cond:
                self.lines.append(line)
                pending.append(line)
                if len(pending) == 3:
                    self.events.append((time.monotonic(), pending[0], pending[1], pending[2]))
                    pending = []
                    self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr += line

    def wait_events(self, n, timeout):
        """The first n events once there are n; raises AssertionError after `timeout` s."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.events) < n:
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError("%d of %d events within %.1f s: %s\nstderr: %s" % (
                        len(self.events), n, timeout, self.events, self.stderr))
                self.cond.wait(min(left, 0.2))
            return list(self.events[:n])

    def snapshot(self):
        with self.cond:
            return list(self.events)

    def close(self):
        """Ends etcdctl (SIGTERM, then SIGKILL), which ends its watch stream."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        self._err_reader.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass

    def cleanup(self):
        self.close()

    def log_tail(self, lines=40):
        return "stdout (last lines): %s\nstderr: %s" % (self.lines[-lines:], self.stderr[-4000:])

    def __repr__(self):
        return "CtlWatch(%s, %d events)" % (" ".join(self.args[3:]), len(self.events))


class Consumer:
    """A queue consumer through python-etcd3: a watch on /q/{queue}/c/{uuid} on
    `client` (one client per consumer: python-etcd3 runs one Watch stream per client).
    Every delivery is recorded in self.deliveries as (monotonic time, idx, key, value).
    With ack=True a worker thread acks each delivery with client.delete(key) and
    records (idx, key, True/False or the exception text, monotonic time the answer came)
    in self.acks; with
    hold_after=N it stops acking after N acks (and holds what it gets).
    """

    def __init__(self, client, queue, ack=True, hold_after=None, prefix="/q/", verb="c",
                 ack_delay=0.0, name=None):
        self.client = client
        self.queue = queue
        self.id = name or str(uuid.uuid4())
        self.key = "%s%s/%s/%s" % (prefix, queue, verb, self.id)
        self.ack = ack
        self.hold_after = hold_after
        self.ack_delay = ack_delay
        self.lock = threading.Lock()
        self.deliveries = []
        self.acks = []
        self.errors = []
        self._todo = pyqueue.Queue()
        self._stopped = threading.Event()
        self._worker = None
        if ack:
            self._worker = threading.Thread(target=self._ack_loop, daemon=True, name="acker-" + self.id[:8])
            self._worker.start()
        self.watch_id = client.add_watch_callback(self.key, self._on_response)

    def _on_response(self, resp):
        if isinstance(resp, Exception):
            with self.lock:
                self.errors.append(repr(resp))
            return
        now = time.monotonic()
        for ev in resp.events:
            if not isinstance(ev, etcd3_events.PutEvent):
                with self.lock:
                    self.errors.append("non-PUT event %r" % (ev,))
                continue
            parsed = parse_msg_key(ev.key)
            idx = parsed[1] if parsed else None
            with self.lock:
                self.deliveries.append((now, idx, ev.key, ev.value))
            if self.ack:
                self._todo.put((idx, ev.key))

    def _ack_loop(self):
        while not self._stopped.is_set():
            try:
                idx, key = self._todo.get(timeout=0.1)
            except pyqueue.Empty:
                continue
            if self.hold_after is not None and len(self.acks) >= self.hold_after:
                continue
            if self.ack_delay:
                time.sleep(self.ack_delay)
            try:
                result = self.client.delete(key)
            except Exception as e:  # noqa: BLE001 - recorded; the message may come back
                result = "%s: %s" % (type(e).__name__, e)
            with self.lock:
                self.acks.append((idx, key, result, time.monotonic()))

    def delivered(self):
        with self.lock:
            return list(self.deliveries)

    def acked(self):
        with self.lock:
            return list(self.acks)

    def cancel(self):
        """Cancels the watch (the consumer's end, as QUEUES.md has it) and stops acking."""
        self._stopped.set()
        try:
            self.client.cancel_watch(self.watch_id)
        except Exception:
            pass
        if self._worker is not None:
            self._worker.join(5)

    def stop_acking(self):
        self._stopped.set()
        if self._worker is not None:
            self._worker.join(5)


class Producer:
    """Puts /q/{queue}/p/p{pid}-{seq:06d}, payload JSON {"producer", "seq"}, one at a time
    on the KV stub `kv` (a raw etcdserverpb.KV stub: its channel reconnects after a
    member restarts), until stop is set, through errors.
    self.acked: [(tail, payload)] whose Put answered OK, with the answer's time in
    self.acked_at; self.unknown: [(tail, payload, error)] whose Put failed (in or not)."""

    def __init__(self, kv, queue, pid, timeout=2.0, interval=0.0):
        self.kv, self.queue, self.pid = kv, queue, pid
        self.timeout, self.interval = timeout, interval
        self.acked, self.acked_at, self.unknown = [], [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True, name="producer-%d" % pid)
        self.thread.start()

    def run(self):
        seq = 0
        while not self.stop.is_set():
            tail = "p%d-%06d" % (self.pid, seq)
            payload = json.dumps({"producer": self.pid, "seq": seq}).encode()
            try:
                self.kv.Put(rpc_pb2.PutRequest(key=("/q/%s/p/%s" % (self.queue, tail)).encode(), value=payload),
                            timeout=self.timeout)
                self.acked.append((tail, payload))
                self.acked_at.append(time.monotonic())
            except grpc.RpcError as e:
                self.unknown.append((tail, payload, e.code().name))
                time.sleep(0.05)
            seq += 1
            if self.interval:
                self.stop.wait(self.interval)

    def finish(self, timeout=10):
        self.stop.set()
        self.thread.join(timeout)
