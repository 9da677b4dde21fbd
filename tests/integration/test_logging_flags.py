#!/usr/bin/python3
"""--logger, --log-outputs and --log-level as etcd's zap logger takes them
(etcd 3.6's embed/config_logging.go): JSON lines to stderr by default, to
stdout or a file when asked; --log-level=warn drops info lines; capnslog
(which etcd 3.4 still took, with a deprecation warning), an unknown logger,
"default" among several outputs, or a file that cannot be opened stop the
member at start, in etcd 3.6's words (harness.refusal_text). Every
expectation holds for etcd 3.6 too (the default binary).

    /usr/bin/python3 tests/integration/test_logging_flags.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_logging_flags.py
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402


class SplitMember(harness.Member):
    """A member whose stdout and stderr go to separate files."""

    def start(self, timeout=harness.START_TIMEOUT_S):
        self.out_path = os.path.join(self.dir, "stdout.log")
        self.err_path = os.path.join(self.dir, "stderr.log")
        self.starts += 1
        with open(self.out_path, "ab") as out, open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True)
        self.pids.append(self.proc.pid)
        self.wait_serving(timeout)

    def log_tail(self, lines=harness.LOG_TAIL_LINES):
        text = ""
        for p in (getattr(self, "out_path", None), getattr(self, "err_path", None)):
            if p and os.path.exists(p):
                with open(p, errors="replace") as f:
                    text += "---- %s ----\n%s\n" % (p, "".join(f.readlines()[-lines:]))
        return text

    def text(self, which):
        with open(self.out_path if which == "stdout" else self.err_path, errors="replace") as f:
            return f.read()


def json_lines(text):
    lines = [line for line in text.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


class LoggingFlagsTest(harness.MemberTestCase):

    def started(self, *args):
        m = self.track(SplitMember(start=False, extra_args=["--logger=zap"] + list(args)))
        m.start()
        m.kv().Put(pb.PutRequest(key=b"a", value=b"1"), timeout=5)
        m.stop()
        return m

    def refused(self, *args):
        m = self.track(harness.Member(start=False, extra_args=list(args)))
        try:
            p = subprocess.run(m.args(), capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.fail("%s: still running after 15 s" % (args,))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        return harness.refusal_text(p.stdout + p.stderr)

    def test_default_output_is_json_lines_on_stderr(self):
        m = self.started()
        self.assertEqual(m.text("stdout"), "")
        lines = json_lines(m.text("stderr"))
        self.assertGreater(len(lines), 3)
        for line in lines:
            self.assertIn(line["level"], ("debug", "info", "warn", "error"), line)
            self.assertIn("msg", line)
            self.assertIn("ts", line)

    def test_stdout_output(self):
        m = self.started("--log-outputs=stdout")
        self.assertEqual(m.text("stderr"), "")
        self.assertGreater(len(json_lines(m.text("stdout"))), 3)

    def test_file_output_appends_json_lines(self):
        m = self.track(SplitMember(start=False))
        path = os.path.join(m.dir, "member.log")
        m.extra_args = ["--logger=zap", "--log-outputs=" + path]
        for _ in range(2):
            m.start()
            m.stop()
        self.assertEqual(m.text("stderr"), "")
        with open(path) as f:
            lines = json_lines(f.read())
        self.assertGreater(len(lines), 6)
        # Appended, not truncated: both runs are in the file.
        starts = [line for line in lines if "starting" in line["msg"]]
        self.assertGreaterEqual(len(starts), 2, [line["msg"] for line in lines])

    def test_warn_level_drops_info_lines(self):
        m = self.started("--log-level=warn")
        levels = {line["level"] for line in json_lines(m.text("stderr"))}
        self.assertNotIn("info", levels)
        self.assertNotIn("debug", levels)

    def test_capnslog_is_refused_as_etcd_36_refuses_it(self):
        self.assertIn("--logger=capnslog is removed in v3.5", self.refused("--logger=capnslog"))

    def test_bad_logging_flags_are_refused(self):
        self.assertIn('unknown logger option "foo"', self.refused("--logger=foo"))
        self.assertIn('multi logoutput for "default" is not supported yet',
                      self.refused("--logger=zap", "--log-outputs=default,stdout"))
        self.assertIn('open sink "/nonexistent-etcdq-dir/x.log": open /nonexistent-etcdq-dir/x.log: '
                      'no such file or directory',
                      self.refused("--logger=zap", "--log-outputs=/nonexistent-etcdq-dir/x.log"))


if __name__ == "__main__":
    harness.main()
