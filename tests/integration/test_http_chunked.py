#!/usr/bin/python3
"""Chunked request bodies (Transfer-Encoding: chunked) on the JSON gateway
(src/http/chunked.h), as etcd's gateway takes them (Go's net/http decodes
them): curl -H 'Transfer-Encoding: chunked' puts and ranges give etcd 3.6's
answers (the oracle, run beside the binary under test); a body in pieces,
a request pipelined behind one, another transfer coding (501, as Go), and
the body bound (etcdq-only: 413, the bound a Content-Length body has).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_http_chunked.py
"""
import base64
import json
import os
import select
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from gatewaylib import BesideOracle, b64, normalize  # noqa: E402

VOLATILE = {"cluster_id", "member_id", "raft_term"}


def curl_chunked(m, path, body):
    """(status, JSON) of a curl POST whose body goes chunked."""
    out = subprocess.run(["curl", "-sS", "--max-time", "10", "-H", "Transfer-Encoding: chunked",
                          "-H", "Content-Type: application/json", "--data-binary", "@-",
                          "-w", "\n%{http_code}", m.client_url + path],
                         input=body, capture_output=True, text=True, check=True).stdout
    text, status = out.rsplit("\n", 1)
    return int(status), json.loads(text)


def chunks(data, size):
    parts = [data[i:i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def exchange(port, parts, pause=0.0, timeout=10):
    """Sends the parts (pausing between them), returns every byte until the server closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        for p in parts:
            s.sendall(p)
            time.sleep(pause)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


def status_of(reply):
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


class HttpChunkedTest(BesideOracle, harness.MemberTestCase):
    def test_curl_chunked_put_and_range_answer_as_etcd(self):
        answers = {}
        for name, m in self.both():
            put = curl_chunked(m, "/v3/kv/put", json.dumps({"key": b64("chunked/a"), "value": b64("v" * 300)}))
            rng = curl_chunked(m, "/v3/kv/range", json.dumps({"key": b64("chunked/a")}))
            answers[name] = (put[0], normalize(put[1], VOLATILE), rng[0], normalize(rng[1], VOLATILE))
        self.assertEqual(answers["under test"], answers["oracle"])
        status, put, status2, rng = answers["under test"]
        self.assertEqual((status, status2), (200, 200))
        self.assertEqual(base64.b64decode(rng["kvs"][0]["value"]), b"v" * 300)

    def test_a_body_in_small_chunks_sent_in_pieces_and_a_request_pipelined_behind_it(self):
        body = json.dumps({"key": b64("chunked/b"), "value": b64("piecewise")}).encode()
        head = (b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        wire = chunks(body, 7)
        for name, m in self.both():
            # In pieces, with pauses: the server waits for the last chunk.
            parts = [head] + [wire[i:i + 10] for i in range(0, len(wire), 10)]
            parts[-1] += b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            reply = exchange(m.client_port, parts, pause=0.02)
            self.assertEqual(reply.count(b"HTTP/1.1 200 OK"), 2, (name, reply))
            self.assertIn(b'"revision"', reply, name)
            self.assertIn(b'"health":"true"', reply, name)
            got = curl_chunked(m, "/v3/kv/range", json.dumps({"key": b64("chunked/b")}))
            self.assertEqual(base64.b64decode(got[1]["kvs"][0]["value"]), b"piecewise", name)

    def test_another_transfer_coding_is_501_as_go(self):
        for name, m in self.both():
            for te in (b"gzip", b"gzip, chunked", b"chunked\r\nTransfer-Encoding: chunked"):
                reply = exchange(m.client_port, [b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + te +
                                                 b"\r\n\r\n0\r\n\r\n"])
                self.assertEqual(status_of(reply), 501, (name, te, reply))

    def test_an_http_1_0_request_is_framed_by_content_length_whatever_its_transfer_encoding(self):
        # Go ignores Transfer-Encoding on an HTTP/1.0 request and reads the
        # body by Content-Length; so must everything behind etcdq's framing
        # (these bodies are not valid chunked coding: read as chunks, a 400).
        body = json.dumps({"key": b64("chunked/ten")}).encode()
        requests = {
            "gateway": b"POST /v3/kv/range HTTP/1.0\r\nContent-Type: application/json\r\n",
            "health": b"GET /health HTTP/1.0\r\n",
            "version": b"GET /version HTTP/1.0\r\n",
        }
        for what, start in requests.items():
            head = start + b"Host: x\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n" % len(body)
            answers = {}
            for name, m in self.both():
                reply = exchange(m.client_port, [head + body])
                status_line, _, rest = reply.partition(b"\r\n")
                self.assertIn(b" 200 ", status_line, (what, name, reply))
                answers[name] = normalize(json.loads(rest.split(b"\r\n\r\n", 1)[1]), VOLATILE)
                if what == "gateway":
                    answers[name]["header"].pop("revision", None)
                if what == "health":  # etcdq adds etcd 3.5's "reason"
                    answers[name] = answers[name]["health"]
            if what == "version":  # etcdq names its own version beside etcd's
                self.assertEqual(set(answers["oracle"]),
                                 {"etcdserver", "etcdcluster", "storage"} & set(answers["under test"]),
                                 answers)
            else:
                self.assertEqual(answers["under test"], answers["oracle"], what)

    def test_malformed_chunks_are_refused(self):
        for name, m in self.both():
            reply = exchange(m.client_port, [b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                                             b"\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"])
            self.assertGreaterEqual(status_of(reply), 400, (name, reply))
            self.assertLess(status_of(reply), 500, (name, reply))

    @unittest.skipIf(harness.is_reference_etcd(), "etcdq's bound; etcd reads the body and gRPC refuses it (400)")
    def test_a_chunked_body_has_the_bound_of_a_content_length_one(self):
        # etcdq refuses a gateway body past its bound (src/http/gateway.h,
        # max_body_bytes: about 4 MiB at the default --max-request-bytes)
        # before reading it, chunked or not; etcd reads it and lets gRPC
        # refuse it. Both connections close and the member keeps serving.
        mib = b"x" * (1 << 20)
        cases = {
            "content-length": (b"Content-Length: %d" % (5 << 20), [mib] * 5),
            "chunked, 1 MiB chunks": (b"Transfer-Encoding: chunked", [chunks(mib, 1 << 20)[:-5]] * 5),
            "chunked, one 5 MiB chunk announced": (b"Transfer-Encoding: chunked", [b"500000\r\n"]),
        }
        for name, (framing, pieces) in cases.items():
            s = socket.create_connection(("127.0.0.1", self.m.client_port), timeout=10)
            try:
                s.sendall(b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n\r\n")
                reply = b""
                for p in pieces + [b""]:
                    if select.select([s], [], [], 0.5)[0]:
                        reply = s.recv(4096)
                        break
                    try:
                        s.sendall(p)
                    except OSError:
                        pass   # closed while sending: the answer is already there
            finally:
                s.close()
            self.assertEqual(status_of(reply), 413, (name, reply))
        got = curl_chunked(self.m, "/v3/kv/range", json.dumps({"key": b64("chunked/a")}))
        self.assertEqual(got[0], 200)


if __name__ == "__main__":
    harness.main()
