#!/usr/bin/python3
"""TLS on the client URLs with etcd's flags (src/net/tls_pump.h, tls_context.h).

A member with an https:// client URL serves etcdctl, curl (health, version,
the JSON gateway) and python-etcd3 over TLS; --client-cert-auth refuses a
client without a certificate, with one from another CA, with one the
--client-crl-file revokes, and plaintext on the TLS port; replaced cert/key
files are served to new connections without a restart; --auto-tls works;
--tls-min-version TLS1.3 refuses a TLS 1.2 client; http:// and https://
listeners coexist; bad TLS settings stop the start with a message naming
the flag and the file. Where etcd 3.6 has the same behaviour, the default
binary (etcd 3.6) is checked against it too (--client-crl-file in DER, as
3.6 reads it: tlslib.py).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_client_tls.py
    /usr/bin/python3 tests/integration/test_client_tls.py      # the oracle
"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import etcd3  # noqa: E402
import harness  # noqa: E402
import tlslib  # noqa: E402


def curl(*args):
    return subprocess.run(["curl", "-sS", "--max-time", "10"] + list(args), capture_output=True, text=True,
                          timeout=30)


class ClientTlsTest(harness.MemberTestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = tlslib.Pki()
        cls.m = cls.track_class(tlslib.TlsMember(
            cls.pki, ["--client-cert-auth", "--client-crl-file", cls.pki.crl], http_too=True))

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.pki.cleanup()

    def ctl(self, *args, cert=None, key=None, ca=None, extra=()):
        p = self.pki
        return tlslib.etcdctl_tls(self.m.endpoint, ca or p.ca, cert or p.client, key or p.client_key, *args,
                                  extra=extra)

    def test_etcdctl_put_get_watch_with_client_certificate(self):
        r = self.ctl("put", "tls-key", "tls-value")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "OK")
        r = self.ctl("get", "tls-key")
        self.assertEqual(r.stdout.split(), ["tls-key", "tls-value"], r.stderr)
        p = self.pki
        cmd = [harness.ETCDCTL, "--endpoints", self.m.endpoint, "--cacert", p.ca, "--cert", p.client, "--key",
               p.client_key, "watch", "tls-watch"]
        w = subprocess.Popen(cmd, env=dict(os.environ, ETCDCTL_API="3"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            seen = []
            reader = threading.Thread(target=lambda: seen.extend(w.stdout.readline() for _ in range(3)))
            reader.start()
            deadline = time.monotonic() + 15
            while reader.is_alive() and time.monotonic() < deadline:
                self.ctl("put", "tls-watch", "v1")
                reader.join(0.5)
            self.assertEqual([s.strip() for s in seen], ["PUT", "tls-watch", "v1"])
        finally:
            w.kill()
            w.wait()

    def assert_refused(self, r):
        self.assertNotEqual(r.returncode, 0, r.stdout)
        # etcdctl says this for a failed TLS dial (3.4 and 3.6 alike).
        self.assertIn("context deadline exceeded", r.stderr)

    def test_refuses_client_without_certificate(self):
        self.assert_refused(tlslib.etcdctl_tls(self.m.endpoint, self.pki.ca, None, None, "get", "k"))

    def test_refuses_certificate_of_another_ca(self):
        self.assert_refused(self.ctl("get", "k", cert=self.pki.client2, key=self.pki.client2_key))

    def test_refuses_revoked_certificate(self):
        self.assert_refused(self.ctl("get", "k", cert=self.pki.revoked, key=self.pki.revoked_key))

    def test_crl_revoking_an_intermediate_ca_refuses_what_it_issued(self):
        # root -> intermediate -> client; the root's CRL revokes the
        # intermediate. etcd checks every certificate the client presents
        # against --client-crl-file (listener_tls.go checkCRL), so the
        # client is refused although its own certificate is not listed;
        # etcdq once checked the client's certificate only, and let it in.
        p = self.pki
        ext = "extendedKeyUsage=clientAuth\n"
        bad_ca, bad_ca_key = p.intermediate("inter-revoked", "revoked-intermediate")
        good_ca, good_ca_key = p.intermediate("inter-ok", "good-intermediate")
        bad, bad_key = p.chain_through("via-revoked", "root", bad_ca, bad_ca_key, ext)
        good, good_key = p.chain_through("via-ok", "root", good_ca, good_ca_key, ext)
        crl = p.crl_of("crl-intermediate", p.ca, p.ca_key, [bad_ca])
        m = self.track(tlslib.TlsMember(p, ["--client-cert-auth", "--client-crl-file", crl]))
        ok = tlslib.etcdctl_tls(m.endpoint, p.ca, good, good_key, "put", "via-intermediate", "1")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assert_refused(tlslib.etcdctl_tls(m.endpoint, p.ca, bad, bad_key, "get", "via-intermediate"))
        r = curl("--cacert", p.ca, "--cert", bad, "--key", bad_key, "https://%s/health" % m.endpoint)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        r = curl("--cacert", p.ca, "--cert", good, "--key", good_key, "https://%s/health" % m.endpoint)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_refuses_plaintext_on_tls_port(self):
        self.assert_refused(tlslib.etcdctl_tls(self.m.endpoint, None, None, None, "get", "k"))
        r = curl("http://%s/health" % self.m.endpoint)
        # etcd closes the connection: "Empty reply from server".
        self.assertEqual(r.returncode, 52, r.stdout + r.stderr)
        if not harness.is_reference_etcd():
            with open(self.m.log_path, errors="replace") as f:
                self.assertIn("first record does not look like a TLS handshake", f.read())

    def test_curl_health_version_and_gateway_over_tls(self):
        p = self.pki
        auth = ["--cacert", p.ca, "--cert", p.client, "--key", p.client_key]
        r = curl(*auth, "https://%s/health" % self.m.endpoint)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["health"], "true")
        r = curl(*auth, "https://%s/version" % self.m.endpoint)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("etcdserver", json.loads(r.stdout))
        r = curl(*auth, "-X", "POST", "https://%s/v3/kv/put" % self.m.endpoint, "-d",
                 '{"key":"Z3c=","value":"dmlhLWd3"}')  # gw = via-gw
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("header", json.loads(r.stdout))
        r = curl(*auth, "-X", "POST", "https://%s/v3/kv/range" % self.m.endpoint, "-d", '{"key":"Z3c="}')
        self.assertEqual(json.loads(r.stdout)["kvs"][0]["value"], "dmlhLWd3")
        # Without a client certificate the handshake fails.
        r = curl("--cacert", p.ca, "https://%s/health" % self.m.endpoint)
        self.assertNotEqual(r.returncode, 0)

    def test_python_etcd3_over_tls(self):
        p = self.pki
        c = etcd3.client(host="127.0.0.1", port=self.m.client_port, ca_cert=p.ca, cert_key=p.client_key,
                         cert_cert=p.client, timeout=10)
        try:
            c.put("py-tls", "value")
            value, meta = c.get("py-tls")
            self.assertEqual(value, b"value")
            # A bigger value crosses several TLS records each way.
            big = os.urandom(300 * 1024)
            c.put("py-tls-big", big)
            self.assertEqual(c.get("py-tls-big")[0], big)
        finally:
            c.close()

    def test_http_and_https_listeners_at_once(self):
        plain = "127.0.0.1:%d" % self.m.http_port
        r = tlslib.etcdctl_tls(plain, None, None, None, "put", "via-plain", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.ctl("get", "via-plain")
        self.assertEqual(r.stdout.split(), ["via-plain", "1"], r.stderr)
        r = curl("http://%s/health" % plain)
        self.assertEqual(json.loads(r.stdout)["health"], "true")

    def test_stalled_handshake_is_closed_and_blocks_nobody(self):
        import socket
        stalled = []
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", self.m.client_port))
            sock.sendall(b"\x16\x03\x01\x00\x40")  # a handshake record's header, then nothing
            stalled.append(sock)
        try:
            r = self.ctl("put", "while-stalled", "1")
            self.assertEqual(r.returncode, 0, r.stderr)
            if harness.is_reference_etcd():
                return  # etcd sets no handshake deadline of its own
            sock = stalled[0]
            sock.settimeout(20)
            t0 = time.monotonic()
            self.assertEqual(sock.recv(100), b"")  # closed by the server (kHandshakeTimeout, 10 s)
            self.assertLess(time.monotonic() - t0, 15)
        finally:
            for sock in stalled:
                sock.close()

    def test_member_list_reports_https_client_url(self):
        r = self.ctl("member", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(self.m.client_url, r.stdout)


class CertificateRotationTest(harness.MemberTestCase):
    def setUp(self):
        self.pki = tlslib.Pki()
        self.addCleanup(self.pki.cleanup)
        self.live = os.path.join(self.pki.dir, "live")
        os.mkdir(self.live)
        self.cert = os.path.join(self.live, "server.crt")
        self.key = os.path.join(self.live, "server.key")
        shutil.copy(self.pki.server, self.cert)
        shutil.copy(self.pki.server_key, self.key)
        self.m = self.track(tlslib.TlsMember(self.pki, tls_args=[
            "--cert-file", self.cert, "--key-file", self.key, "--trusted-ca-file", self.pki.ca]))

    def replace(self, src, dst):
        tmp = dst + ".tmp"
        shutil.copy(src, tmp)
        os.rename(tmp, dst)

    def test_new_connection_sees_replaced_certificate(self):
        before, _ = tlslib.served_certificate(self.m.client_port)
        with open(self.pki.server) as f:
            self.assertEqual(tlslib.serial_of(before), tlslib.serial_of(f.read()))
        new_cert, new_key = self.pki.issue("server-new", "server", self.pki.ca, self.pki.ca_key,
                                           "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                           "extendedKeyUsage=serverAuth,clientAuth\n", serial=777777)
        self.replace(new_key, self.key)
        self.replace(new_cert, self.cert)
        deadline = time.monotonic() + 10
        with open(new_cert) as f:
            want = tlslib.serial_of(f.read())
        got = None
        while time.monotonic() < deadline:
            pem, _ = tlslib.served_certificate(self.m.client_port)
            got = tlslib.serial_of(pem)
            if got == want:
                break
            time.sleep(0.3)
        self.assertEqual(got, want)
        r = tlslib.etcdctl_tls(self.m.endpoint, self.pki.ca, self.pki.client, self.pki.client_key, "put", "a", "b")
        self.assertEqual(r.returncode, 0, r.stderr)

    @unittest.skipIf(harness.is_reference_etcd(), "etcd reads the files per handshake and fails it instead")
    def test_broken_replacement_keeps_serving_the_previous_certificate(self):
        with open(self.cert, "w") as f:
            f.write("not a certificate\n")
        time.sleep(1.5)
        pem, _ = tlslib.served_certificate(self.m.client_port)
        with open(self.pki.server) as f:
            self.assertEqual(tlslib.serial_of(pem), tlslib.serial_of(f.read()))
        with open(self.m.log_path, errors="replace") as f:
            self.assertIn("do not load", f.read())

    @unittest.skipIf(harness.is_reference_etcd(), "etcdq's bound on what it re-reads")
    def test_a_fifo_at_the_certificate_path_blocks_nothing(self):
        # The files are re-read on new connections: a FIFO there once hung
        # every new TLS connection for good (and /dev/zero grew the member
        # without bound). Only regular files, read without blocking, count.
        os.remove(self.cert)
        os.mkfifo(self.cert)
        time.sleep(1.5)
        pem, _ = tlslib.served_certificate(self.m.client_port)
        with open(self.pki.server) as f:
            self.assertEqual(tlslib.serial_of(pem), tlslib.serial_of(f.read()))
        with open(self.m.log_path, errors="replace") as f:
            self.assertIn("not a regular file", f.read())
        os.remove(self.cert)
        self.replace(self.pki.server, self.cert)
        time.sleep(1.5)
        pem, _ = tlslib.served_certificate(self.m.client_port)
        with open(self.pki.server) as f:
            self.assertEqual(tlslib.serial_of(pem), tlslib.serial_of(f.read()))


class TlsOptionsTest(harness.MemberTestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = tlslib.Pki()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.pki.cleanup()

    def test_auto_tls_serves_etcdctl_with_insecure_skip_verify(self):
        m = self.track(tlslib.TlsMember(self.pki, tls_args=["--auto-tls"], client_creds=False, start=False))
        # The generated certificate is signed by nobody the client knows.
        m.wait_serving = lambda timeout=20: None
        m.start()
        deadline = time.monotonic() + 20
        while True:
            r = tlslib.etcdctl_tls(m.endpoint, None, None, None, "put", "auto", "tls",
                                   extra=["--insecure-skip-tls-verify", "--insecure-transport=false"])
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        self.assertEqual(r.returncode, 0, r.stderr + m.log_tail())
        self.assertTrue(os.path.exists(os.path.join(m.data_dir, "fixtures", "client", "cert.pem")))
        # Without skipping verification the self-signed certificate is refused.
        r = tlslib.etcdctl_tls(m.endpoint, self.pki.ca, None, None, "get", "auto")
        self.assertNotEqual(r.returncode, 0)

    def test_tls13_minimum_refuses_tls12_client(self):
        m = self.track(tlslib.TlsMember(self.pki, ["--tls-min-version", "TLS1.3"]))
        _, r12 = tlslib.served_certificate(m.client_port, "-tls1_2", "-cert", self.pki.client, "-key",
                                           self.pki.client_key, "-CAfile", self.pki.ca)
        self.assertNotIn("BEGIN CERTIFICATE", r12.stdout)
        self.assertNotEqual(r12.returncode, 0)
        pem, r13 = tlslib.served_certificate(m.client_port, "-tls1_3", "-cert", self.pki.client, "-key",
                                             self.pki.client_key, "-CAfile", self.pki.ca)
        self.assertIn("BEGIN CERTIFICATE", pem, r13.stdout + r13.stderr)

    def test_default_accepts_tls12_client(self):
        m = self.track(tlslib.TlsMember(self.pki))
        pem, r = tlslib.served_certificate(m.client_port, "-tls1_2", "-cert", self.pki.client, "-key",
                                           self.pki.client_key, "-CAfile", self.pki.ca)
        self.assertIn("BEGIN CERTIFICATE", pem, r.stdout + r.stderr)

    def test_cipher_suites_restrict_tls12(self):
        # An AES-128-GCM suite: etcd 3.6's HTTP/2 server refuses to start
        # without one ("http2: TLSConfig.CipherSuites is missing an
        # HTTP/2-required AES_128_GCM_SHA256 cipher").
        m = self.track(tlslib.TlsMember(self.pki, ["--cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                                                   "--tls-max-version", "TLS1.2"]))
        pem, r = tlslib.served_certificate(m.client_port, "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256", "-cert",
                                           self.pki.client, "-key", self.pki.client_key)
        self.assertIn("BEGIN CERTIFICATE", pem, r.stdout + r.stderr)
        pem, r = tlslib.served_certificate(m.client_port, "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384", "-cert",
                                           self.pki.client, "-key", self.pki.client_key)
        self.assertEqual(pem, "")

    def test_sigterm_with_live_tls_watch_stops_cleanly(self):
        p = self.pki
        m = self.track(tlslib.TlsMember(p))
        c = etcd3.client(host="127.0.0.1", port=m.client_port, ca_cert=p.ca, cert_key=p.client_key,
                         cert_cert=p.client, timeout=10)
        try:
            events, cancel = c.watch("live-watch")
            c.put("live-watch", "1")
            self.assertEqual(next(events).value, b"1")
            # New handshakes race the shutdown too.
            stop = threading.Event()

            def dial():
                while not stop.is_set():
                    tlslib.served_certificate(m.client_port)
            t = threading.Thread(target=dial)
            t.start()
            try:
                time.sleep(0.5)
                # etcd re-raises SIGTERM; etcdq exits 0.
                self.assertEqual(m.stop(), harness.clean_exit_status(), m.log_tail())
            finally:
                stop.set()
                t.join()
            cancel()
        finally:
            c.close()

    def test_https_metrics_url(self):
        p = self.pki
        port = harness.free_port()
        m = self.track(tlslib.TlsMember(p, ["--listen-metrics-urls", "https://127.0.0.1:%d" % port]))
        auth = ["--cacert", p.ca, "--cert", p.client, "--key", p.client_key]
        r = curl(*auth, "https://127.0.0.1:%d/metrics" % port)
        self.assertEqual(r.returncode, 0, r.stderr + m.log_tail())
        self.assertIn("etcd_server_has_leader", r.stdout)
        r = curl(*auth, "https://127.0.0.1:%d/health" % port)
        self.assertEqual(json.loads(r.stdout)["health"], "true")

    def test_config_file_client_transport_security_block(self):
        p = self.pki
        m = self.track(tlslib.TlsMember(p, tls_args=[], start=False))
        path = os.path.join(m.dir, "etcd.conf.yml")
        with open(path, "w") as f:
            f.write("name: %s\ndata-dir: %s\nlisten-client-urls: %s\nadvertise-client-urls: %s\n"
                    "listen-peer-urls: %s\ninitial-advertise-peer-urls: %s\ninitial-cluster: %s=%s\n"
                    "client-transport-security:\n  cert-file: %s\n  key-file: %s\n  trusted-ca-file: %s\n"
                    "  client-cert-auth: true\ncipher-suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"
                    % (m.name, m.data_dir, m.client_url, m.client_url, m.peer_url, m.peer_url, m.name, m.peer_url,
                       p.server, p.server_key, p.ca))
        m.args = lambda: [m.binary, "--config-file", path]
        m.start()
        r = tlslib.etcdctl_tls(m.endpoint, p.ca, p.client, p.client_key, "put", "from-config", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = tlslib.etcdctl_tls(m.endpoint, p.ca, None, None, "get", "from-config")
        self.assertNotEqual(r.returncode, 0)

    def test_etcd_environment_variables(self):
        p = self.pki
        m = tlslib.TlsMember(p, tls_args=[], start=False)
        self.track(m)
        env = dict(os.environ, ETCD_CERT_FILE=p.server, ETCD_KEY_FILE=p.server_key, ETCD_TRUSTED_CA_FILE=p.ca,
                   ETCD_CLIENT_CERT_AUTH="true")
        real_popen = subprocess.Popen

        def popen(*a, **kw):
            kw["env"] = env
            return real_popen(*a, **kw)
        subprocess.Popen = popen
        try:
            m.start()
        finally:
            subprocess.Popen = real_popen
        r = tlslib.etcdctl_tls(m.endpoint, p.ca, p.client, p.client_key, "put", "from-env", "1")
        self.assertEqual(r.returncode, 0, r.stderr)

    def start_fails(self, tls_args, *wanted):
        m = self.track(tlslib.TlsMember(self.pki, tls_args=tls_args, start=False))
        proc = subprocess.run(m.args(), capture_output=True, text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        for w in wanted:
            self.assertIn(w, harness.refusal_text(proc.stdout + proc.stderr))

    def test_startup_refusals_name_the_flag_and_file(self):
        p = self.pki
        missing = os.path.join(p.dir, "missing.pem")
        # etcd's own message for an https URL without a certificate.
        self.start_fails([], "TLS key/cert (--cert-file, --key-file) must be provided for client url https://")
        self.start_fails(["--cert-file", p.server, "--key-file", missing], missing, "no such file or directory")
        # etcd 3.6's HTTP/2 server wants an AES-128-GCM suite among TLS 1.2's.
        self.start_fails(p.server_args() + ["--cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"],
                         "http2: TLSConfig.CipherSuites is missing an HTTP/2-required AES_128_GCM_SHA256 cipher")
        if harness.is_reference_etcd():
            return
        self.start_fails(["--cert-file", missing, "--key-file", p.server_key], "--cert-file " + missing)
        self.start_fails(["--cert-file", p.server, "--key-file", p.client_key],
                         "--key-file " + p.client_key, "tls: private key does not match public key")
        self.start_fails(p.server_args()[:4] + ["--trusted-ca-file", missing], "--trusted-ca-file " + missing)
        self.start_fails(p.server_args() + ["--client-crl-file", missing], "--client-crl-file " + missing)
        self.start_fails(p.server_args() + ["--client-crl-file", p.ca], "--client-crl-file " + p.ca)
        self.start_fails(p.server_args() + ["--cipher-suites", "TLS_NOPE"], 'unexpected TLS cipher suite "TLS_NOPE"')
        self.start_fails(p.server_args() + ["--tls-min-version", "TLS1.1"],
                         'unexpected TLS version "TLS1.1" (must be one of: TLS1.2, TLS1.3)')


class ClientCertCommonNameTest(harness.MemberTestCase):
    """With --client-cert-auth and auth on, a request with no token is made by
    the user its verified certificate names (its Common Name), as etcd's
    AuthInfoFromTLS: root's certificate can write, a reader's can only read."""

    @classmethod
    def setUpClass(cls):
        cls.pki = tlslib.Pki()
        cls.reader, cls.reader_key = cls.pki.issue("reader", "reader", cls.pki.ca, cls.pki.ca_key,
                                                   "extendedKeyUsage=clientAuth\n")
        cls.m = cls.track_class(tlslib.TlsMember(cls.pki, ["--client-cert-auth"]))

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.pki.cleanup()

    def ctl(self, *args, cert=None, key=None):
        p = self.pki
        return tlslib.etcdctl_tls(self.m.endpoint, p.ca, cert or p.client, key or p.client_key, *args)

    def test_common_name_is_the_user(self):
        for step in (["user", "add", "root:rootpw"], ["user", "grant-role", "root", "root"],
                     ["user", "add", "reader:readerpw"], ["role", "add", "ro"],
                     ["role", "grant-permission", "ro", "read", "cn-key"], ["user", "grant-role", "reader", "ro"],
                     ["put", "cn-key", "before"], ["auth", "enable"]):
            r = self.ctl(*step)
            self.assertEqual(r.returncode, 0, (step, r.stderr))
        # root's certificate (CN=root), no --user: root writes.
        r = self.ctl("put", "cn-key", "by-root-cert")
        self.assertEqual(r.returncode, 0, r.stderr)
        # reader's certificate: reads, cannot write.
        r = self.ctl("get", "cn-key", "--print-value-only", cert=self.reader, key=self.reader_key)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "by-root-cert"), r.stderr)
        r = self.ctl("put", "cn-key", "by-reader", cert=self.reader, key=self.reader_key)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("permission denied", r.stderr)
        # A token wins over the certificate: reader's certificate with root's password writes.
        r = self.ctl("--user", "root:rootpw", "put", "cn-key", "by-root-user", cert=self.reader, key=self.reader_key)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.ctl("get", "cn-key", "--print-value-only")
        self.assertEqual(r.stdout.strip(), "by-root-user", r.stderr)
        # Watch is a stream: the certificate names its user too (kube-apiserver
        # with etcd auth watches this way). reader may watch cn-key, not cn-other.
        p = self.pki
        base = [harness.ETCDCTL, "--endpoints", self.m.endpoint, "--cacert", p.ca, "--cert", self.reader,
                "--key", self.reader_key, "--dial-timeout=3s", "watch"]
        env = dict(os.environ, ETCDCTL_API="3")
        w = subprocess.Popen(base + ["cn-key"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        denied = subprocess.Popen(base + ["cn-other"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env)
        try:
            time.sleep(1.5)
            r = self.ctl("put", "cn-key", "watched-by-reader")
            self.assertEqual(r.returncode, 0, r.stderr)
            time.sleep(1.5)
        finally:
            for proc in (w, denied):
                proc.terminate()
            wout, werr = w.communicate(timeout=10)
            dout, derr = denied.communicate(timeout=10)
        self.assertIn("watched-by-reader", wout, werr)
        self.assertNotIn("permission denied", werr)
        self.assertIn("permission denied", dout + derr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
