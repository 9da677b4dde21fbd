#!/usr/bin/python3
"""Command-line flags behave as etcd's (Go's flag package): a flag given
twice takes its last value, as unit files that append an override expect
(etcdq once refused to start: "At Most 1 required but received 2"). A new
member whose --initial-advertise-peer-urls are not what --initial-cluster
lists for it is refused, with etcd's message (etcdq once started anyway).
--help shows each flag's default and names the offline restore command.
A flag etcd 3.6 does not define stops the start with Go's message and exit
status 2, as etcd's (etcd 3.6 dropped --enable-v2 and
--experimental-backend-bbolt-freelist-type: they are unknown there too);
bad values of the flags etcdq accepts only to ignore them are refused as Go
refuses them, and so are feature gates etcd 3.6 does not have. (etcd 3.6's
other flags: test_flags_etcd36.py.)

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_flags_as_etcd.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def txn_of_puts(endpoint, n):
    body = "\n".join("put k%d v" % i for i in range(n))
    return subprocess.run([harness.ETCDCTL, "--endpoints", endpoint, "txn"], input="\n\n" + body + "\n\n",
                          capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"), timeout=30)


class FlagsAsEtcd(harness.MemberTestCase):
    def test_a_flag_given_twice_takes_the_last_value(self):
        m = self.new_member(["--max-txn-ops", "1", "--max-txn-ops", "3"])
        ok = txn_of_puts(m.endpoint, 3)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        refused = txn_of_puts(m.endpoint, 4)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("too many operations in txn request", refused.stderr)

    def test_advertised_peer_url_missing_from_initial_cluster_is_refused(self):
        d = tempfile.mkdtemp(prefix="etcdq-flags-")
        try:
            cp, pp, other = harness.free_port(), harness.free_port(), harness.free_port()
            args = [harness.binary_under_test(), "--name", "a", "--data-dir", os.path.join(d, "data"),
                    "--listen-client-urls", "http://127.0.0.1:%d" % cp,
                    "--advertise-client-urls", "http://127.0.0.1:%d" % cp,
                    "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
                    "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp]
            r = subprocess.run(args + ["--initial-cluster", "a=http://127.0.0.1:%d" % other],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("--initial-cluster has a=http://127.0.0.1:%d but missing from "
                          "--initial-advertise-peer-urls=http://127.0.0.1:%d" % (other, pp), r.stderr + r.stdout)
            # The same URLs in another order start.
            p = subprocess.Popen(args[:-1] + ["http://127.0.0.1:%d,http://127.0.0.1:%d" % (pp, other),
                                              "--initial-cluster", "a=http://127.0.0.1:%d,a=http://127.0.0.1:%d"
                                              % (other, pp)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                with self.assertRaises(subprocess.TimeoutExpired):
                    p.wait(3)
            finally:
                p.kill()
                p.wait()
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def refused(self, *flags):
        d = tempfile.mkdtemp(prefix="etcdq-flags-")
        try:
            r = subprocess.run([harness.binary_under_test(), "--data-dir", os.path.join(d, "data")] + list(flags),
                               capture_output=True, text=True, timeout=30)
            self.assertFalse(os.path.exists(os.path.join(d, "data")), "refused after opening the data dir")
            return r
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_a_flag_etcd36_does_not_define_stops_the_start_in_gos_words(self):
        # etcd 3.6.17: "flag provided but not defined: -bogus-flag", exit 2.
        for flag in ("--bogus-flag", "--bogus-flag=1", "--enable-v2=false",
                     "--experimental-backend-bbolt-freelist-type=map"):
            r = self.refused(flag)
            self.assertEqual(r.returncode, 2, r.stderr)
            name = flag.lstrip("-").split("=")[0]
            self.assertIn("flag provided but not defined: -" + name, harness.refusal_text(r.stderr))

    def test_an_argument_that_is_no_flag_stops_the_start(self):
        # etcd 3.6: '"extra" is not a valid flag' (and bool flags take
        # their value after "=", so "--client-cert-auth true" is refused).
        r = self.refused("--name", "x", "extra")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('"extra" is not a valid flag', harness.refusal_text(r.stderr))
        r = self.refused("--client-cert-auth", "true")
        self.assertIn('"true" is not a valid flag', harness.refusal_text(r.stderr))

    def test_bad_values_of_etcd36_flags_are_refused_as_etcd_refuses_them(self):
        # Words of etcd 3.6.17 for each (Go's flag package and pkg/featuregate).
        cases = [
            (["--feature-gates=Bogus=true"],
             'invalid value "Bogus=true" for flag -feature-gates: unrecognized feature gate: Bogus'),
            (["--feature-gates=InitialCorruptCheck=maybe"],
             'invalid value "InitialCorruptCheck=maybe" for flag -feature-gates: invalid value of '
             'InitialCorruptCheck=maybe, err: strconv.ParseBool: parsing "maybe": invalid syntax'),
            (["--feature-gates=InitialCorruptCheck"],
             'invalid value "InitialCorruptCheck" for flag -feature-gates: missing bool value for InitialCorruptCheck'),
            (["--experimental-enable-lease-checkpoint=true", "--feature-gates=LeaseCheckpointPersist=true"],
             "cannot specify both flags: --experimental-enable-lease-checkpoint=true and "
             "--feature-gates=LeaseCheckpoint=false at the same time, please just use "
             "--feature-gates=LeaseCheckpoint=false"),
            (["--max-wals=abc"], 'invalid value "abc" for flag -max-wals: parse error'),
            (["--max-snapshots=-1"], 'invalid value "-1" for flag -max-snapshots: parse error'),
            (["--grpc-keepalive-timeout=5"], 'invalid value "5" for flag -grpc-keepalive-timeout: parse error'),
            (["--unsafe-no-fsync=maybe"], 'invalid boolean value "maybe" for -unsafe-no-fsync: parse error'),
            (["--discovery-fallback=proxy"],
             'v2 proxy is deprecated, and --discovery-fallback can\'t be configured as "proxy"'),
            (["--warning-unary-request-duration=1s", "--experimental-warning-unary-request-duration=2s"],
             "both --experimental-warning-unary-request-duration and --warning-unary-request-duration flags are set"),
        ]
        for flags, words in cases:
            r = self.refused(*flags)
            self.assertNotEqual(r.returncode, 0, flags)
            self.assertIn(words, harness.refusal_text(r.stderr), flags)

    def test_a_negative_corruption_check_interval_is_refused(self):
        # etcd 3.6 panics on it (NewTicker); etcdq refuses it before the data
        # dir exists rather than start with the check silently off.
        if harness.is_reference_etcd():
            self.skipTest("etcd 3.6 panics rather than refuse")
        for flag in ("--corrupt-check-time=-1s", "--experimental-corrupt-check-time=-5m"):
            r = self.refused(flag)
            self.assertNotEqual(r.returncode, 0, flag)
            self.assertIn("must not be negative", harness.refusal_text(r.stderr), flag)

    def test_discovery_is_refused_rather_than_ignored(self):
        if harness.is_reference_etcd():
            self.skipTest("etcdq refuses discovery; etcd 3.6 runs it (DNS here)")
        # Ignoring it would bootstrap another cluster than the one asked for.
        r = self.refused("--discovery-srv=example.com")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("etcdq has no discovery", harness.refusal_text(r.stderr))

    def test_ignored_flags_come_from_etcd_variables_too(self):
        if harness.is_reference_etcd():
            self.skipTest("etcdq's log line naming the flags it ignores")
        saved = dict(os.environ)
        os.environ.update({"ETCD_MAX_WALS": "7", "ETCD_ENABLE_PPROF": "true"})
        try:
            m = self.new_member()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        with open(m.log_path, "rb") as f:
            log = f.read().decode("utf-8", "replace")
        line = [l for l in log.splitlines() if "accepted and ignored" in l]
        self.assertEqual(len(line), 1, log[-3000:])
        self.assertIn("--max-wals=7", line[0])
        self.assertIn("--enable-pprof=true", line[0])

    def test_help_shows_each_flags_default_and_the_offline_restore(self):
        if harness.is_reference_etcd():
            self.skipTest("etcdq's own --help")
        # The defaults shown are the values a member takes when the flag is
        # left out (etcd's --help prints its defaults too); the restore
        # command is its own entry point (`etcdq snapshot restore`).
        r = subprocess.run([harness.binary_under_test(), "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Usage: etcdq [OPTIONS]", r.stdout)  # it said "Usage: [OPTIONS]"
        # "  --name TEXT=default (Env:ETCD_NAME)": the flag, its type, "=", its default.
        shown = dict(re.findall(r"^\s+(--[a-z-]+) [^=\s]*=(\S+)", r.stdout, re.M))
        self.assertEqual(shown.get("--name"), "default", r.stdout)
        self.assertEqual(shown.get("--max-request-bytes"), "1572864", r.stdout)
        self.assertEqual(shown.get("--max-txn-ops"), "128", r.stdout)
        self.assertEqual(shown.get("--snapshot-count"), "8192", r.stdout)
        self.assertEqual(shown.get("--initial-cluster-state"), "new", r.stdout)
        self.assertIn("etcdq snapshot restore", r.stdout)
        restore = subprocess.run([harness.binary_under_test(), "snapshot", "restore", "--help"],
                                 capture_output=True, text=True, timeout=30)
        self.assertEqual(restore.returncode, 0, restore.stderr)
        self.assertIn("--data-dir", restore.stdout + restore.stderr)


if __name__ == "__main__":
    harness.main()
