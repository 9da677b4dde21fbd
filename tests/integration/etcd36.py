"""etcd 3.6's binaries (etcd, etcdctl, etcdutl) for the tests that compare
etcdq with etcd 3.6 side by side.

The directory is harness.ETCD36_DIR ($ETCD36_DIR, else what
scripts/etcd36.sh prints).

    d = etcd36.bin_dir(); d + "/etcd"
    r = etcd36.etcdctl("127.0.0.1:2379", "put", "a", "1")   # Result(rc, out, err, error)
    etcd36.mask(text)                                     # ids and ports replaced, for comparing
"""
import os
import re
import subprocess

import harness


def bin_dir():
    return harness.ETCD36_DIR


def etcd():
    return os.path.join(bin_dir(), "etcd")


class Result:
    def __init__(self, rc, out, err):
        self.rc = rc
        self.out = out
        self.err = err
        # etcdctl's last words: "Error: <message>" (its client's JSON log lines come before)
        errs = [line for line in err.splitlines() if line.startswith("Error:")]
        self.error = errs[-1] if errs else ""

    def text(self):
        """What a user reads: stdout, then the "Error:" line, then the exit status."""
        return "%s%s\nexit %d" % (self.out, self.error, self.rc)

    def __repr__(self):
        return "Result(rc=%d, out=%r, error=%r)" % (self.rc, self.out, self.error)


def _run(tool, args, timeout, env=None):
    p = subprocess.run([os.path.join(bin_dir(), tool)] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=timeout, env=dict(os.environ, **(env or {})),
                       stdin=subprocess.DEVNULL)
    return Result(p.returncode, p.stdout, p.stderr)


def etcdctl(endpoints, *args, timeout=120):
    """etcdctl 3.6 against `endpoints` (host:port[,host:port...]; None: no --endpoints)."""
    a = (["--endpoints", endpoints] if endpoints else []) + ["--dial-timeout", "3s"] + list(args)
    return _run("etcdctl", a, timeout, env={"ETCDCTL_API": "3"})


def etcdutl(*args, timeout=120):
    return _run("etcdutl", list(args), timeout)


# etcdctl prints some ids with %16x (space-padded), others with %x.
_HEX_ID = re.compile(r" *\b[0-9a-f]{8,16}\b")
_DEC_ID = re.compile(r"\b[0-9]{17,20}\b")
_PORT = re.compile(r"127\.0\.0\.1:[0-9]+")
_TOOK = re.compile(r"took (?:= )?[0-9.]+[µmn]?s")


def mask(text):
    """Member and cluster ids (hex and decimal), loopback ports and durations replaced."""
    text = _HEX_ID.sub(lambda m: (" " if m.group(0).startswith(" ") else "") + "<id>", text)
    text = _DEC_ID.sub("<id>", text)
    text = _PORT.sub("127.0.0.1:<port>", text)
    return _TOOK.sub(lambda m: "took = <t>" if "=" in m.group(0) else "took <t>", text)
