"""The queues' page (src/queue/page.h): /queues in a real browser (Debian's
headless Chromium, which scripts/setup.sh installs) after real produces,
deliveries, acks and dead letters shows each queue's depth, in flight,
consumers, dead letters and totals, and rates once it polled twice;
/queues.json under auth shows only the queues the requester may read, and
nothing without a token. etcdq-only (etcd has no queues)."""
import html.parser
import json
import os
import shutil
import subprocess
import tempfile
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


class Cells(html.parser.HTMLParser):
    """Every table cell with an id, by id; <body>'s data-polls."""

    def __init__(self):
        super().__init__()
        self.cells, self.polls, self._id = {}, 0, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td":
            self._id = a.get("id")
            self.cells[self._id] = ""
        if tag == "body":
            self.polls = int(a.get("data-polls", "0"))

    def handle_endtag(self, tag):
        if tag == "td":
            self._id = None

    def handle_data(self, data):
        if self._id:
            self.cells[self._id] += data


def browse(url):
    """The page's DOM after its script ran for 5 s of the browser's (virtual) time."""
    profile = tempfile.mkdtemp(prefix="etcdq-chromium-")
    try:
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking", "--disable-component-update",
                            "--disable-sync", "--user-data-dir=" + profile, "--virtual-time-budget=5000",
                            "--dump-dom", url], capture_output=True, text=True, timeout=90)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if r.returncode != 0:
        raise AssertionError("chromium failed (%d): %s" % (r.returncode, r.stderr[-2000:]))
    p = Cells()
    p.feed(r.stdout)
    return p, r.stdout


def rows(cells):
    """{queue: {field: text}} from the cells "{field}-{row}"."""
    names = {k.rsplit("-", 1)[1]: v for k, v in cells.items() if k.startswith("name-")}
    out = {}
    for k, v in cells.items():
        field, row = k.rsplit("-", 1)
        out.setdefault(names[row], {})[field] = v
    return out


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

        for url in ("http://%s/queues" % m.endpoint, "http://127.0.0.1:%d/queues" % mp):
            p, dom = browse(url)
            self.assertGreaterEqual(p.polls, 2, dom[-3000:])
            q = rows(p.cells)
            web = q["web"]
            self.assertEqual((web["depth"], web["in_flight"], web["consumers"], web["produced"], web["acked"],
                              web["dead_letters"]), ("3", "3", "1", "5", "2", "0"), (url, q))
            # Two polls, nothing produced or acked between them.
            self.assertEqual((web["produce_rate"], web["ack_rate"]), ("0.0", "0.0"), q)
            self.assertGreater(float(web["oldest_age"]), 0)
            self.assertEqual((q["dl"]["depth"], q["dl"]["dead_letters"], q["dl"]["consumers"]), ("0", "1", "1"), q)
            self.assertEqual((q["dl.dlq"]["depth"], q["dl.dlq"]["in_flight"]), ("1", "0"), q)

        # The consumer goes: what it held is no longer in flight (though not redelivered yet).
        ws.close()
        self.assertTrue(wait_until(lambda: queue_of(get_json(jurl)[1], "web")["in_flight"] == 0, 5))
        web = queue_of(get_json(jurl)[1], "web")
        self.assertEqual((web["depth"], web["in_flight"], web["consumers"]), (3, 0, 0), web)

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


if __name__ == "__main__":
    harness.main()
