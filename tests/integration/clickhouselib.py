"""ClickHouse for the ch:{table} queue tests: Debian's clickhouse-server
started with scripts/clickhouse.sh (the README's way), on free loopback
ports in a temp dir; and InsertGate, an HTTP proxy in front of it that can
hold back ClickHouse's answer to an INSERT it has taken, so a test can kill
etcdq exactly between ClickHouse's acceptance and the batch's delete."""
import http.client
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import harness

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "clickhouse.sh")

def wait_for(test, what, fn, timeout=60, step=0.1):
    """fn()'s first true answer within `timeout` seconds; else fails `test` with
    the last answer (the sink's tests wait on rows, dead letters, log lines)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(step)
    test.fail("timed out waiting for %s (last: %r)" % (what, last))


# The README's table (README, "Work queues"): the message's fields, and the
# queue and idx etcdq gives each row.
EVENTS_DDL = ("CREATE TABLE events (etcdq_queue String, etcdq_idx UInt64, id UInt64, name String) "
              "ENGINE = MergeTree ORDER BY (etcdq_queue, etcdq_idx)")


class ClickHouse:
    """One clickhouse-server on loopback (scripts/clickhouse.sh), its data in a temp dir.
    The ports are chosen at once, so etcdq can be pointed at it before it starts."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="etcdq-it-clickhouse-")
        self.http_port = harness.free_port()
        self.tcp_port = harness.free_port()
        self.url = "http://127.0.0.1:%d" % self.http_port
        self._configured = False

    def script(self, *args, timeout=90):
        return subprocess.run(["bash", SCRIPT] + list(args), capture_output=True, text=True, timeout=timeout)

    def start(self):
        args = ["start", self.dir]
        if not self._configured:
            args += [str(self.http_port), str(self.tcp_port)]
        p = self.script(*args)
        if p.returncode != 0:
            raise RuntimeError("clickhouse.sh start failed: %s\n%s" % (p.stderr, self.log_tail()))
        if p.stdout.strip() != self.url:
            raise RuntimeError("clickhouse.sh start printed %r, not %s" % (p.stdout, self.url))
        self._configured = True

    def stop(self):
        self.script("stop", self.dir, timeout=60)

    def sql(self, statement):
        """Through the script, as the README does it."""
        p = self.script("sql", self.dir, statement)
        if p.returncode != 0:
            raise RuntimeError("clickhouse.sh sql failed: %s" % p.stderr)
        return p.stdout

    def query(self, sql):
        req = urllib.request.Request(self.url + "/", data=sql.encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    def log_tail(self):
        for name in ("error.log", "server.log"):
            p = os.path.join(self.dir, "log", name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    return f.read()[-3000:]
        return "(no log)"

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class InsertGate:
    """An HTTP proxy in front of ClickHouse. arm(): the next INSERT that ClickHouse
    answers 200 (its rows are in) gets no answer; `held` is set, and the connection is
    closed once `release` is set. down = True: every request is refused (503)."""

    def __init__(self, target_url):
        self.target = urllib.parse.urlparse(target_url)
        self.port = harness.free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.down = False
        self.held = threading.Event()
        self.release = threading.Event()
        self.inserts = 0
        self._armed = False
        self._lock = threading.Lock()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                gate._handle(self)

            def do_GET(self):
                gate._handle(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arm(self):
        with self._lock:
            self.held.clear()
            self.release.clear()
            self._armed = True

    def _handle(self, h):
        n = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(n) if n else b""
        if self.down:
            # Refused with an answer: an answer lost would make etcdq wait
            # before it asks again (a lost answer may be an insert landing).
            data = b"Code: 210, e.displayText() = DB::NetException: InsertGate is down"
            h.send_response(503)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        conn = http.client.HTTPConnection(self.target.hostname, self.target.port, timeout=30)
        try:
            conn.request(h.command, h.path, body=body,
                         headers={"Content-Type": h.headers.get("Content-Type", "text/plain")})
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        insert = urllib.parse.unquote_plus(h.path).upper().startswith("/?QUERY=INSERT")
        with self._lock:
            if insert and r.status == 200:
                self.inserts += 1
            hold = insert and r.status == 200 and self._armed
            if hold:
                self._armed = False
        if hold:
            self.held.set()
            self.release.wait(120)
            h.close_connection = True
            return
        h.send_response(r.status)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def cleanup(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
