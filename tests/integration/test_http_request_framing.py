#!/usr/bin/python3
"""Where one HTTP/1.1 request ends on the client port (src/http/request_framing.h),
as etcd's server (Go's net/http) decides it: etcd 3.6, run beside the binary
under test, is the oracle for every byte of the answer.

- Two Content-Length lines that disagree (`N` then `0`, or `0` then `N`), or
  one that is not a plain decimal number: "400 Bad Request" and the
  connection closed. Before, `Content-Length: N` then `Content-Length: 0`
  framed the request by the first and the server behind read the second:
  the N body bytes ran as a second, hidden request (a put).
- A header name with a space before its colon (`Transfer-Encoding :
  chunked`, `Content-Length : N`): Go's "400 Bad Request: invalid header
  name", closed. Before, it was not seen as framing and the chunks ran as a
  request. Other malformed header lines (no colon, an empty or non-token
  name, a control byte in a value, a first line that starts with a blank):
  "400 Bad Request", closed.
- Lines ending in a bare LF (or a mix of LF and CRLF), and a header folded
  over two lines: served as Go serves them. Before, a bare-LF request never
  completed (no CRLF CRLF) and got no answer.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_http_request_framing.py
"""
import base64
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from gatewaylib import BesideOracle, b64  # noqa: E402

EOF = b"<closed>"


def exchange(port, data, quiet_s=1.0, timeout_s=10):
    """Sends `data`, returns what comes back: until the server closes (then
    ending in EOF), or until it has been quiet for `quiet_s` after answering."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    try:
        s.sendall(data)
        reply = b""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s.settimeout(quiet_s if reply else max(0.1, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return reply + EOF
            except socket.timeout:
                if reply:
                    return reply
                continue
            if not chunk:
                return reply + EOF
            reply += chunk
        return reply
    finally:
        s.close()


def responses(reply):
    """[(status line, body)] of the responses in `reply` (bodies framed by
    Content-Length, or by the close), and whether the server closed."""
    closed = reply.endswith(EOF)
    if closed:
        reply = reply[:-len(EOF)]
    out = []
    while reply:
        head, sep, rest = reply.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.split(b"\r\n")
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length is None:
            out.append((lines[0], rest))
            break
        out.append((lines[0], rest[:length]))
        reply = rest[length:]
    return out, closed


def put_request(key, value, eol=b"\r\n"):
    body = json.dumps({"key": b64(key), "value": b64(value)}).encode()
    return eol.join([b"POST /v3/kv/put HTTP/1.1", b"Host: x", b"Content-Length: %d" % len(body), b"", b""]) + body


class HttpRequestFramingTest(BesideOracle, harness.MemberTestCase):
    def stored(self, m, key):
        """The value of `key` on member m (None if absent), read over the gateway."""
        body = json.dumps({"key": b64(key)}).encode()
        reply = exchange(m.client_port, b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        (status, payload), = responses(reply)[0]
        self.assertIn(b" 200 ", status, reply)
        kvs = json.loads(payload).get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def assert_refused_as_etcd(self, what, data, expect):
        """Both members answer `data` with the same bytes, `expect` as its
        status line and body, and close; no request hidden in it ran."""
        replies = {}
        for name, m in self.both():
            reply = exchange(m.client_port, data)
            got, closed = responses(reply)
            self.assertTrue(closed, (what, name, reply))
            self.assertEqual(len(got), 1, (what, name, reply))
            self.assertEqual(got[0], (b"HTTP/1.1 " + expect, expect), (what, name, reply))
            replies[name] = reply
        self.assertEqual(replies["under test"], replies["oracle"], what)
        for name, m in self.both():
            self.assertIsNone(self.stored(m, "hidden/" + what), (what, name))

    def test_conflicting_or_malformed_content_length_is_400_and_closes(self):
        def smuggle(what, *lines):
            inner = put_request("hidden/" + what, "ran")
            head = b"".join((line % len(inner) if b"%d" in line else line) + b"\r\n" for line in lines)
            return (b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + head +
                    b"\r\n" + inner)
        cases = {
            "n-then-0": smuggle("n-then-0", b"Content-Length: %d", b"Content-Length: 0"),
            "0-then-n": smuggle("0-then-n", b"Content-Length: 0", b"Content-Length: %d"),
            "n-then-n+1": smuggle("n-then-n+1", b"Content-Length: %d", b"Content-Length: 1%d"),
            "two-values": smuggle("two-values", b"Content-Length: %d, 0"),
            "trailing-junk": smuggle("trailing-junk", b"Content-Length: %dx"),
            "plus-sign": smuggle("plus-sign", b"Content-Length: +%d"),
            "negative": smuggle("negative", b"Content-Length: -%d"),
            "empty": smuggle("empty", b"Content-Length:"),
            "too-large": smuggle("too-large", b"Content-Length: 99999999999999999999%d"),
        }
        for what, data in cases.items():
            self.assert_refused_as_etcd(what, data, b"400 Bad Request")

    def test_equal_content_length_lines_are_one(self):
        # Go takes repeated equal values (blanks around them trimmed) as one.
        body = json.dumps({"key": b64("dup/equal"), "value": b64("v")}).encode()
        data = (b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length:  %d \r\n"
                b"Connection: close\r\n\r\n%s" % (len(body), len(body), body))
        for name, m in self.both():
            got, closed = responses(exchange(m.client_port, data))
            self.assertEqual(len(got), 1, name)
            self.assertIn(b" 200 ", got[0][0], (name, got))
            self.assertEqual(self.stored(m, "dup/equal"), "v", name)

    def test_space_before_the_colon_is_invalid_header_name_and_closes(self):
        inner = put_request("hidden/te-space", "ran")
        te = (b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n" +
              b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner))
        self.assert_refused_as_etcd("te-space", te, b"400 Bad Request: invalid header name")
        inner = put_request("hidden/cl-space", "ran")
        cl = (b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nContent-Length : %d\r\n\r\n%s" % (len(inner), inner))
        self.assert_refused_as_etcd("cl-space", cl, b"400 Bad Request: invalid header name")
        # HTTP/1.0 ignores Transfer-Encoding, not a bad name.
        te10 = b"GET /health HTTP/1.0\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n"
        self.assert_refused_as_etcd("te10-space", te10, b"400 Bad Request: invalid header name")
        other = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Probe : 1\r\n\r\n"
        self.assert_refused_as_etcd("other-space", other, b"400 Bad Request: invalid header name")

    def test_malformed_header_lines_are_400_and_close(self):
        cases = {
            "no-colon": b"GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n",
            "empty-name": b"GET /health HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n",
            "non-token-name": b"GET /health HTTP/1.1\r\nHost: x\r\nX(y): v\r\n\r\n",
            "tab-before-colon": b"GET /health HTTP/1.1\r\nHost: x\r\nX-Y\t: v\r\n\r\n",
            "control-byte": b"GET /health HTTP/1.1\r\nHost: x\r\nX-Y: a\x01b\r\n\r\n",
            "lone-cr-in-value": b"GET /health HTTP/1.1\r\nHost: x\r\nX-Y: a\rb\r\n\r\n",
            "cr-cr-lf": b"GET /health HTTP/1.1\r\nHost: x\r\nX-Y: a\r\r\n\r\n",
            "first-line-folded": b"GET /health HTTP/1.1\r\n X-Y: a\r\nHost: x\r\n\r\n",
            # A bad line after one with a space before its colon: the
            # malformed line wins, as Go reads the lines first.
            "space-then-no-colon": b"GET /health HTTP/1.1\r\nHost: x\r\nA : b\r\nNoColon\r\n\r\n",
        }
        for what, data in cases.items():
            self.assert_refused_as_etcd(what, data, b"400 Bad Request")

    def test_bare_lf_requests_are_served_as_etcd_serves_them(self):
        cases = {
            "get-lf": b"GET /health HTTP/1.1\nHost: x\nConnection: close\n\n",
            "get-mixed": b"GET /health HTTP/1.1\r\nHost: x\nConnection: close\r\n\n",
            "get-lf-crlf-end": b"GET /health HTTP/1.1\nHost: x\nConnection: close\n\r\n",
            "folded": b"GET /health HTTP/1.1\r\nHost: x\r\nX-Y: a\r\n b\r\nConnection: close\r\n\r\n",
            "version-lf": b"GET /version HTTP/1.1\nHost: x\nConnection: close\n\n",
        }
        for what, data in cases.items():
            answers = {}
            for name, m in self.both():
                got, closed = responses(exchange(m.client_port, data))
                self.assertTrue(closed, (what, name, got))
                self.assertEqual(len(got), 1, (what, name, got))
                status, body = got[0]
                self.assertEqual(status, b"HTTP/1.1 200 OK", (what, name, got))
                answers[name] = json.loads(body)
            if what == "version-lf":  # etcdq names its own version beside etcd's
                self.assertTrue(set(answers["oracle"]) <= set(answers["under test"]), answers)
            else:
                self.assertEqual(answers["under test"]["health"], answers["oracle"]["health"], what)

        # A bare-LF put with a body, and a second request kept alive behind it.
        for name, m in self.both():
            data = put_request("lf/put", "bare", eol=b"\n") + b"GET /health HTTP/1.1\nHost: x\nConnection: close\n\n"
            got, closed = responses(exchange(m.client_port, data))
            self.assertTrue(closed, (name, got))
            self.assertEqual([s for s, _ in got], [b"HTTP/1.1 200 OK"] * 2, (name, got))
            self.assertIn("header", json.loads(got[0][1]), name)
            self.assertEqual(json.loads(got[1][1])["health"], "true", name)
            self.assertEqual(self.stored(m, "lf/put"), "bare", name)

        # Keep-alive: the connection stays open after a bare-LF request.
        for name, m in self.both():
            got, closed = responses(exchange(m.client_port, b"GET /health HTTP/1.1\nHost: x\n\n", quiet_s=0.5))
            self.assertFalse(closed, (name, got))
            self.assertEqual([s for s, _ in got], [b"HTTP/1.1 200 OK"], (name, got))


if __name__ == "__main__":
    harness.main()
