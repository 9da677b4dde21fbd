#!/usr/bin/python3
"""A member's SIGTERM ends open watches the way a stopping etcd does, so that
clients reconnect and resume instead of giving up.

Against etcd (3.4 and 3.6) a client sees, on SIGTERM: no response at all, then
the stream ends with UNAVAILABLE ("Socket closed": the connection went away).
etcd's Go client (clientv3, hence etcdctl and kube-apiserver) takes UNAVAILABLE
as "right back" and opens its watches again from the revision after the last
event it got; a `canceled` response instead ends that watch for good. etcdq used
to send every watch a canceled response ("etcdserver: server stopped") before
ending the stream, so every client watch died with each member restart.

Checked here, against both binaries:
  - a raw Watch stream gets no canceled (or any other) response after SIGTERM and
    ends with UNAVAILABLE, promptly;
  - `etcdctl watch` keeps running across SIGTERM and a restart on the same data
    dir and port, and prints a put made after the restart (it resumes).

    /usr/bin/python3 tests/integration/test_watch_sigterm.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_watch_sigterm.py
"""
import os
import queue
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402
from etcd3.etcdrpc import rpc_pb2_grpc as rpc_grpc  # noqa: E402

import harness  # noqa: E402
import watchlib as wl  # noqa: E402

# etcd 3.6 ends open watch streams when its graceful stop times out: after its
# request timeout, 5 s + 2 x the election timeout (embed/serve.go stopServers),
# 7 s with the defaults; etcd 3.4 cut them at once. etcdq ends them within 6 s.
STREAM_END_S = 10.0
EXIT_S = 10.0
RESUME_S = 30.0     # etcdctl's gRPC reconnect backoff grows 1 s, 1.6 s, 2.6 s ...


class EtcdctlWatch:
    """`etcdctl watch PREFIX --prefix` with its stdout lines collected by a thread."""

    def __init__(self, member, prefix):
        env = dict(os.environ, ETCDCTL_API="3")
        self.proc = subprocess.Popen(
            [harness.ETCDCTL, "--endpoints", member.endpoint, "watch", prefix, "--prefix"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            start_new_session=True)
        self.lines = queue.Queue()
        self.seen = []
        self.stderr = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    @staticmethod
    def _pump(f, q):
        for line in f:
            q.put(line.decode(errors="replace").rstrip("\n"))
        q.put(None)

    def _pump_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace").rstrip("\n"))

    def wait_line(self, text, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if text in self.seen:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return False
            if line is None:   # etcdctl exited
                self.lines.put(None)
                return text in self.seen
            self.seen.append(line)

    def cleanup(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()

    def __repr__(self):
        return "etcdctl watch (exit %s): stdout %r, stderr %r" % (self.proc.poll(), self.seen, self.stderr)


class WatchSigtermTest(harness.MemberTestCase):
    def log_text(self, thing):
        if isinstance(thing, EtcdctlWatch):
            return repr(thing)
        return super().log_text(thing)

    def test_sigterm_ends_each_watch_stream_with_unavailable_and_no_canceled_response(self):
        m = self.new_member()
        ws = wl.WatchStream(wl.ready_channel(m), name="sigterm")
        ws.create(b"s/k")
        ws.create(b"s/", range_end=wl.prefix_end(b"s/"), prev_kv=True)
        ws.wait_created(2, 10)
        m.kv(wl.ready_channel(m)).Put(pb.PutRequest(key=b"s/k", value=b"1"), timeout=10)
        self.assertTrue(ws.wait_until(lambda s: len([1 for _, r in s.log if r.events]) >= 2, 10))
        n = len(ws.log)
        t0 = time.monotonic()
        m.proc.send_signal(signal.SIGTERM)
        self.assertTrue(ws.wait_done(STREAM_END_S), "the watch stream was still open %.0f s after SIGTERM" %
                        STREAM_END_S)
        m.proc.wait(EXIT_S)
        after = ws.responses()[n:]
        sys.stderr.write("\n  stream ended %.3f s after SIGTERM with %s %r; responses after SIGTERM: %s\n" % (
            ws.done_at - t0, ws.status[0], ws.status[1],
            [(r.watch_id, r.canceled, r.cancel_reason, len(r.events)) for r in after]))
        self.assertEqual([(r.watch_id, r.canceled, r.cancel_reason) for r in after], [],
                         "a canceled response makes etcd's clients end the watch for good")
        self.assertEqual(ws.status[0], grpc.StatusCode.UNAVAILABLE)

    def test_a_watch_reopened_at_once_during_shutdown_is_never_canceled(self):
        # clientv3 re-opens a watch at once after Unavailable (no backoff on
        # the first retry), and takes Canceled as the end of the watch. This
        # client does the same, with no pause at all: every stream it opens
        # from SIGTERM on must end Unavailable (from the stopping member, or
        # a refused connection), none Canceled. Three SIGTERMs: the old
        # order (streams ended before gRPC's GOAWAY) failed most of them.
        for round_ in range(3):
            m = self.new_member()
            ch = wl.ready_channel(m)
            stub = rpc_grpc.WatchStub(ch)
            ends = []
            stop = threading.Event()
            opened = threading.Event()

            def requests():
                yield pb.WatchRequest(create_request=pb.WatchCreateRequest(key=b"r/k"))
                while not stop.wait(0.05):
                    pass

            def reopen():
                while not stop.is_set():
                    try:
                        for _ in stub.Watch(requests(), timeout=30):
                            opened.set()
                    except grpc.RpcError as e:
                        ends.append((e.code(), e.details()))
                        if e.code() != grpc.StatusCode.UNAVAILABLE:
                            return

            t = threading.Thread(target=reopen, daemon=True)
            t.start()
            self.assertTrue(opened.wait(10), "the watch was not created")
            m.proc.send_signal(signal.SIGTERM)
            m.proc.wait(EXIT_S)
            time.sleep(0.3)
            stop.set()
            t.join(35)
            ch.close()
            sys.stderr.write("\n  round %d: %d streams ended after SIGTERM: %s\n" % (
                round_, len(ends), sorted(set(str(c) for c, _ in ends))))
            self.assertTrue(ends)
            self.assertEqual([e for e in ends if e[0] != grpc.StatusCode.UNAVAILABLE], [])

    def test_etcdctl_watch_resumes_across_sigterm_and_restart(self):
        m = self.new_member()
        w = self.track(EtcdctlWatch(m, "e/"))
        kv = m.kv(wl.ready_channel(m))
        # etcdctl prints nothing when its watch is created: put until it shows one.
        deadline = time.monotonic() + 10
        i = 0
        while not w.wait_line("before-%d" % i, 0.5):
            self.assertLess(time.monotonic(), deadline, "etcdctl watch printed nothing: %r" % w)
            i += 1
            kv.Put(pb.PutRequest(key=b"e/k", value=b"before-%d" % i), timeout=10)
        m.proc.send_signal(signal.SIGTERM)
        m.proc.wait(EXIT_S)
        time.sleep(1.0)   # etcdctl sees the member gone and starts retrying
        self.assertIsNone(w.proc.poll(), "etcdctl watch exited on SIGTERM: %r" % w)
        m.start()
        kv = m.kv(wl.ready_channel(m))
        kv.Put(pb.PutRequest(key=b"e/k", value=b"after-restart"), timeout=10)
        t0 = time.monotonic()
        got = w.wait_line("after-restart", RESUME_S)
        sys.stderr.write("\n  etcdctl watch printed the put made after the restart: %s (%.1f s); stderr %r\n" % (
            got, time.monotonic() - t0, w.stderr))
        self.assertTrue(got, "etcdctl watch did not resume after the restart: %r" % w)
        self.assertIsNone(w.proc.poll(), "etcdctl watch exited: %r" % w)
        self.assertNotIn("watch was canceled", " ".join(w.stderr))


if __name__ == "__main__":
    harness.main()
