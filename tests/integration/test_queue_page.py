"""The queues' page (src/queue/page.h): /queues in a real browser (Debian's
headless Chromium, which scripts/setup.sh installs) after real produces,
deliveries, acks and dead letters shows each queue's depth, in flight,
consumers, dead letters and totals, and rates once it polled twice;
/queues.json under auth shows only the queues the requester may read, and
nothing without a token. etcdq-only (etcd has no queues)."""
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from etcd3.etcdrpc import auth_pb2, rpc_pb2

import harness
import watchlib
from queue_util import msg_key, wait_until
from test_auth import md
from test_queue_auth import give, new_user

CHROMIUM = shutil.which("chromium")


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
    it reads commands on fd 3 and answers on fd 4, each JSON message ending in a NUL), with
    the standard library only."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="etcdq-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._ans_r, ans_w = os.pipe()

        def fds():
            a, b = os.dup(cmd_r), os.dup(ans_w)  # copies first: neither dup2 below clobbers a source
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.proc = subprocess.Popen(
            # --disable-dev-shm-usage: a container's /dev/shm may be 64 MiB (Docker's default).
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-dev-shm-usage",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--user-data-dir=" + self.profile, "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(cmd_r)
        os.close(ans_w)
        self._buf = b""
        self._id = 0
        with harness._live_lock:  # killed with the members if the run is interrupted
            harness._live_members.add(self)

    def call(self, method, params=None, session=None, timeout=30):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buf:
                ready, _, _ = select.select([self._ans_r], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    raise AssertionError("chromium did not answer %s within %d s" % (method, timeout))
                chunk = os.read(self._ans_r, 1 << 16)
                if not chunk:
                    raise AssertionError("chromium exited")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise AssertionError("%s: %s" % (method, answer["error"]))
                return answer["result"]

    def open(self, url):
        """A new tab on `url`; returns its session."""
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        return self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def eval(self, session, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        return r["result"].get("value")

    def page(self, session):
        """What the page shows: (polls done, {queue: {field: cell text}}), read at one instant."""
        # While the tab still loads there may be no body yet: zero polls then.
        raw = self.eval(session, "(() => { try { return JSON.stringify([Number(document.body.dataset.polls || 0), "
                                 "Array.from(document.querySelectorAll('td[id]')).map(td => [td.id, td.textContent])]);"
                                 " } catch (e) { return '[0, []]'; } })()")
        if raw is None:
            return 0, {}
        polls, cells = json.loads(raw)
        names = {k.rsplit("-", 1)[1]: v for k, v in cells if k.startswith("name-")}
        rows = {}
        for k, v in cells:
            field, row = k.rsplit("-", 1)
            rows.setdefault(names[row], {})[field] = v
        return polls, rows

    def wait_page(self, session, pred, timeout=15):
        """Reads the page every 50 ms until pred(rows) holds; returns those rows."""
        deadline = time.monotonic() + timeout
        while True:
            polls, rows = self.page(session)
            if polls >= 2 and pred(rows):
                return rows
            if time.monotonic() > deadline:
                raise AssertionError("the page never showed it; it shows %s" % rows)
            time.sleep(0.05)

    def cleanup(self):
        """Kills the browser and its renderers (its own process group); idempotent."""
        with harness._live_lock:
            harness._live_members.discard(self)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for fd in (self._cmd_w, self._ans_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


def get_json(url, token=None):
    req = urllib.request.Request(url, headers={"Authorization": token} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def queue_of(j, name):
    """The entry of queue `name` in a /queues.json answer ({"depth": -1} when absent)."""
    return next((q for q in j.get("queues", []) if q["name"] == name), {"depth": -1, "in_flight": -1})


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueuePage(harness.MemberTestCase):
    @unittest.skipIf(CHROMIUM is None, "needs Debian's chromium (scripts/setup.sh installs it)")
    def test_browser_shows_what_happened(self):
        mp = harness.free_port()
        m = self.new_member(["--listen-metrics-urls", "http://127.0.0.1:%d" % mp])
        c = m.client()
        c.put("/q/dl/config", '{"visibility_timeout": 0.2, "max_deliveries": 1}')
        c.put("/q/dl/p/lost", "x")
        for i in range(5):
            c.put("/q/web/p/m%d" % i, "v%d" % i)
        ws = watchlib.WatchStream(watchlib.ready_channel(m))
        self.addCleanup(ws.close)
        ws.create(b"/q/web/c/w1")
        ws.create(b"/q/dl/c/lazy")
        self.assertTrue(ws.wait_until(lambda s: sum(
            1 for _t, r in s.log for e in r.events if e.kv.key.startswith(b"/q/web/")) >= 5))
        c.delete(msg_key("web", 1, "m0"))
        c.delete(msg_key("web", 2, "m1"))
        jurl = "http://%s/queues.json" % m.endpoint
        self.assertTrue(wait_until(lambda: queue_of(get_json(jurl)[1], "dl.dlq")["depth"] == 1, 10))
        # The consumer w1 holds all five, and gets whatever comes next.

        b = Browser()
        self.addCleanup(b.cleanup)
        tab = b.open("http://%s/queues" % m.endpoint)
        q = b.wait_page(tab, lambda q: "web" in q and q["web"]["acked"] == "2")
        web = q["web"]
        self.assertEqual((web["depth"], web["in_flight"], web["consumers"], web["produced"], web["acked"],
                          web["dead_letters"]), ("3", "3", "1", "5", "2", "0"), q)
        self.assertEqual((web["produce_rate"], web["ack_rate"]), ("0.0", "0.0"), q)  # nothing since
        self.assertGreater(float(web["oldest_age"]), 0)
        self.assertEqual((q["dl"]["depth"], q["dl"]["dead_letters"], q["dl"]["consumers"]), ("0", "1", "1"), q)
        self.assertEqual((q["dl.dlq"]["depth"], q["dl.dlq"]["in_flight"]), ("1", "0"), q)

        # Produce 30 and ack 10: the poll that first shows them shows a rate (per second over
        # the time since the poll before, a second or so).
        for i in range(30):
            c.put("/q/web/p/n%d" % i, "x")
        q = b.wait_page(tab, lambda q: q["web"]["produced"] == "35")
        self.assertGreater(float(q["web"]["produce_rate"]), 0, q)
        for idx in range(3, 13):
            c.delete(msg_key("web", idx, "m%d" % (idx - 1) if idx <= 5 else "n%d" % (idx - 6)))
        q = b.wait_page(tab, lambda q: q["web"]["acked"] == "12")
        self.assertGreater(float(q["web"]["ack_rate"]), 0, q)
        self.assertEqual(q["web"]["depth"], "23", q)

        # The same on the metrics port.
        q = b.wait_page(b.open("http://127.0.0.1:%d/queues" % mp), lambda q: "web" in q)
        self.assertEqual((q["web"]["depth"], q["web"]["acked"], q["dl.dlq"]["depth"]), ("23", "12", "1"), q)

        # The consumer goes: what it held is no longer in flight (though not redelivered yet).
        ws.close()
        q = b.wait_page(tab, lambda q: q["web"]["consumers"] == "0" and q["web"]["in_flight"] == "0")
        self.assertEqual(q["web"]["depth"], "23", q)

    def test_json_under_auth_shows_only_readable_queues(self):
        m = self.new_member(["--bcrypt-cost", "4"])
        root = new_user(m, "viewer")
        for q in ("jobs", "secret"):
            m.kv().Put(rpc_pb2.PutRequest(key=("/q/%s/p/t" % q).encode(), value=b"v"), timeout=10,
                       metadata=md(root))
        url = "http://%s/queues.json" % m.endpoint
        status, j = get_json(url)
        self.assertEqual((status, j["error"]), (401, "etcdserver: user name is empty"))
        status, j = get_json(url, "not-a-token")
        self.assertEqual((status, j["error"]), (401, "etcdserver: invalid auth token"))
        status, j = get_json(url, root)
        self.assertEqual((status, [q["name"] for q in j["queues"]]), (200, ["jobs", "secret"]))
        viewer = give(m, root, "viewer", "jobs-read", b"/q/jobs/", b"/q/jobs0", auth_pb2.Permission.READ)
        status, j = get_json(url, viewer)
        self.assertEqual((status, [q["name"] for q in j["queues"]]), (200, ["jobs"]))
        self.assertEqual(j["queues"][0]["depth"], 1)
        # The page itself holds no data: served to anyone, it asks for a user.
        with urllib.request.urlopen("http://%s/queues" % m.endpoint, timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertIn(b'id="login"', r.read())
        if CHROMIUM is None:
            return
        # In a browser: the login form, then what that user may see.
        b = Browser()
        self.addCleanup(b.cleanup)
        tab = b.open("http://%s/queues" % m.endpoint)
        deadline = time.monotonic() + 15
        while b.eval(tab, "(document.getElementById('login') || {style: {}}).style.display") != "block":
            self.assertLess(time.monotonic(), deadline, "no login form")
            time.sleep(0.05)
        b.eval(tab, "document.getElementById('user').value = 'viewer';"
                    "document.getElementById('password').value = 'pw';"
                    "document.getElementById('login').requestSubmit()")
        q = b.wait_page(tab, lambda q: "jobs" in q)
        self.assertEqual(list(q), ["jobs"])
        self.assertEqual(q["jobs"]["depth"], "1")


if __name__ == "__main__":
    harness.main()
