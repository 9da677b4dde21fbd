#!/usr/bin/python3
"""etcd's --config-file (src/cli/config_file.h): the same YAML starts etcd 3.6
and etcdq; the file's values win over every other flag and ETCD_* variable
(etcd ignores those when a config file is given); unknown keys are ignored;
a value of the wrong type or a bad value stops the member at start with the
key named, in etcd 3.6's words (its zap line "failed to verify flags", read
by harness.refusal_text). Every expectation holds for etcd 3.6 too (the
default binary) (client TLS from the file: test_client_tls.py; peer TLS
running: tests/cluster/test_peer_tls.py).

    /usr/bin/python3 tests/integration/test_config_file.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_config_file.py
"""
import json
import os
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

REFUSAL_TIMEOUT_S = 15.0


class ConfigMember(harness.Member):
    """A member started from a YAML config file (plus `noise`: flags the file overrides)."""

    def __init__(self, body, noise=(), env=None, **kw):
        self.body = body
        self.noise = list(noise)
        self.env = env or {}
        super().__init__(start=False, **kw)
        self.config_path = os.path.join(self.dir, "etcd.conf.yml")
        with open(self.config_path, "w") as f:
            f.write(self.yaml())
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise

    def yaml(self):
        return self.body.format(name=self.name, data_dir=self.data_dir, client_url=self.client_url,
                                peer_url=self.peer_url)

    def args(self):
        return [self.binary, "--config-file", self.config_path] + self.noise

    def start(self, timeout=harness.START_TIMEOUT_S):
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            super().start(timeout)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


BASE = textwrap.dedent("""\
    name: {name}
    data-dir: {data_dir}
    listen-client-urls: {client_url}
    advertise-client-urls: {client_url}
    listen-peer-urls: {peer_url}
    initial-advertise-peer-urls: {peer_url}
    initial-cluster: {name}={peer_url}
    initial-cluster-token: from-the-file
    initial-cluster-state: new
    logger: zap
    """)

# etcd.conf.yml.sample's shape: empty values, TLS blocks that ask for nothing,
# and keys etcdq does not use (cors, max-wals, enable-pprof, cipher-suites...).
SAMPLE_LIKE = BASE + textwrap.dedent("""\
    wal-dir:
    snapshot-count: 10000
    heartbeat-interval: 100
    election-timeout: 1000
    quota-backend-bytes: 0
    max-wals: 5
    cors:
    discovery:
    discovery-fallback: 'proxy'
    strict-reconfig-check: false
    enable-pprof: true
    client-transport-security:
      cert-file:
      key-file:
      client-cert-auth: false
      trusted-ca-file:
      auto-tls: false
    peer-transport-security:
      cert-file:
      key-file:
      client-cert-auth: false
      trusted-ca-file:
      auto-tls: false
      allowed-cn:
      allowed-hostname:
    self-signed-cert-validity: 1
    log-level: info
    log-outputs: [stderr]
    force-new-cluster: false
    auto-compaction-mode: periodic
    auto-compaction-retention: "1"
    cipher-suites: [
      TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
      TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
    ]
    a-key-nobody-knows: 12
    """)


def refusal(test, body):
    """Starts the binary on a config file that must be refused: returns its
    exit status and output (a member that serves instead fails the test)."""
    m = test.track(harness.Member(start=False))
    path = os.path.join(m.dir, "etcd.conf.yml")
    with open(path, "w") as f:
        f.write(body.format(name=m.name, data_dir=m.data_dir, client_url=m.client_url, peer_url=m.peer_url))
    try:
        p = subprocess.run([m.binary, "--config-file", path], capture_output=True, text=True,
                           timeout=REFUSAL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        test.fail("still running %.0f s after start: the config was not refused\n%s\n%s" % (
            REFUSAL_TIMEOUT_S, body, (e.stderr or b"")[-2000:]))
    return p.returncode, p.stdout + p.stderr


class ConfigFileTest(harness.MemberTestCase):

    def member_list(self, m):
        out = subprocess.run([harness.ETCDCTL, "--endpoints", m.endpoint, "member", "list", "-w", "json"],
                             env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)["members"]

    def test_the_file_wins_over_flags_and_environment(self):
        body = BASE + "max-request-bytes: 4096\nsnapshot-count: 50\n"
        # Flags and ETCD_* that would change the name, the size limit and the
        # client URL if etcd (or etcdq) read them beside the file.
        m = self.track(ConfigMember(
            body, name="from-file",
            noise=["--name", "from-flag", "--max-request-bytes", "99999999",
                   "--listen-client-urls", "http://127.0.0.1:1"],
            env={"ETCD_NAME": "from-env", "ETCD_MAX_REQUEST_BYTES": "99999999",
                 "ETCD_INITIAL_CLUSTER_TOKEN": "from-env"}))
        members = self.member_list(m)
        self.assertEqual([x.get("name") for x in members], ["from-file"])
        self.assertEqual(members[0]["clientURLs"], [m.client_url])
        self.assertTrue(os.path.isdir(os.path.join(m.data_dir, "member")), "the file's data-dir is used")
        kv = m.kv()
        kv.Put(pb.PutRequest(key=b"small", value=b"x" * 1000), timeout=5)
        with self.assertRaises(grpc.RpcError) as cm:
            kv.Put(pb.PutRequest(key=b"big", value=b"x" * 5000), timeout=5)
        self.assertEqual(cm.exception.details(), "etcdserver: request is too large")

    def test_etcd_config_file_variable_names_the_file(self):
        m = self.track(ConfigMember(BASE, name="via-env", noise=[]))
        # The same member again, the path given by ETCD_CONFIG_FILE only.
        m.stop()
        m.noise = []
        path = m.config_path
        m.args = lambda: [m.binary]
        saved = os.environ.get("ETCD_CONFIG_FILE")
        os.environ["ETCD_CONFIG_FILE"] = path
        try:
            m.start()
        finally:
            if saved is None:
                os.environ.pop("ETCD_CONFIG_FILE")
            else:
                os.environ["ETCD_CONFIG_FILE"] = saved
        self.assertEqual([x.get("name") for x in self.member_list(m)], ["via-env"])

    def test_a_file_shaped_like_etcds_sample_starts(self):
        m = self.track(ConfigMember(SAMPLE_LIKE, name="sample"))
        m.kv().Put(pb.PutRequest(key=b"a", value=b"1"), timeout=5)
        self.assertEqual([x.get("name") for x in self.member_list(m)], ["sample"])

    def test_values_of_the_wrong_type_are_refused_naming_the_key(self):
        for extra, key in (
                ("heartbeat-interval: abc\n", "heartbeat-interval"),
                ("heartbeat-interval: -5\n", "heartbeat-interval"),
                ("max-request-bytes: 1.5\n", "max-request-bytes"),
                ('snapshot-count: "5"\n', "snapshot-count"),
                ('strict-reconfig-check: "yes"\n', "strict-reconfig-check"),
                # etcd reads the retention as a string: a bare YAML number is refused.
                ("auto-compaction-retention: 1\n", "auto-compaction-retention"),
                ("log-outputs: stderr\n", "log-outputs"),
                ("quota-backend-bytes: lots\n", "quota-backend-bytes")):
            with self.subTest(extra=extra):
                rc, out = refusal(self, BASE + extra)
                self.assertNotEqual(rc, 0, out)
                # etcd 3.6: "... into Go struct field configYAML.Config.<key> of type <type>".
                self.assertIn("Go struct field configYAML.Config." + key + " of type ", harness.refusal_text(out))

    def test_bad_values_are_refused_at_start(self):
        for extra, words in (
                ("initial-cluster-state: weird\n", 'unexpected clusterState "weird"'),
                ('auto-compaction-mode: weird\nauto-compaction-retention: "1"\n',
                 'unknown auto-compaction-mode "weird"'),
                ('auto-compaction-retention: "abc"\n', 'time: invalid duration'),
                ("logger: foo\n", "foo"),
                ("name: [a, b]\n", "configYAML.Config.name"),
                ("name: [unclosed\n", "")):
            with self.subTest(extra=extra):
                body = BASE.replace("name: {name}\n", "") if extra.startswith("name:") else BASE
                rc, out = refusal(self, body + extra)
                self.assertNotEqual(rc, 0, out)
                self.assertIn(words, harness.refusal_text(out))

    def test_peer_tls_block_with_a_missing_key_pair_is_refused_naming_the_file(self):
        body = (BASE.replace("{peer_url}", "https://127.0.0.1:{peer_port}") +
                "peer-transport-security:\n  cert-file: /nonexistent/peer.pem\n  key-file: /nonexistent/peer.key\n")
        m = self.track(harness.Member(start=False))
        body = body.replace("{peer_port}", str(m.peer_port))
        rc, out = refusal(self, body)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("open /nonexistent/peer.pem: no such file or directory", harness.refusal_text(out))


if __name__ == "__main__":
    harness.main()
