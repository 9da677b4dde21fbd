"""Start, stop, crash and restart one etcd-compatible member for integration tests.

The binary under test is $ETCDQ_BIN (CMake points it at build/etcdq); when unset
it is etcd 3.6 (ORACLE, built from the pinned Go modules by scripts/etcd36.sh),
the oracle every expectation here is checked against. The member gets etcd's
own flags, so both binaries run unchanged. ETCDCTL and ETCDUTL are 3.6's too;
ETCD34 (Debian's etcd 3.4) is used only where a test says why.

    m = Member(extra_args=["--max-txn-ops", "8"])   # started and serving
    kv = m.kv()                                      # raw etcdserverpb.KV stub
    c = m.client()                                   # python-etcd3 client
    m.kill9(); m.restart()                           # same data dir, same ports
    m.cleanup()                                      # always; also run at exit

Every member lives in its own temp dir (data dir + server.log). Processes are
started in their own session so a test runner's signals do not reach them by
accident; cleanup(), an atexit hook and a SIGTERM/SIGINT/SIGHUP handler kill
whatever is left and remove the dir (set ETCDQ_KEEP_TEST_DIRS=1 to keep dirs).
MemberTestCase prints the log tail of its members when a test fails.

Under a sanitizer build (scripts/checks.sh), ETCDQ_SANITIZER_REPORTS names
the directory the sanitizers write their reports to (log_path, one file per
process id): a test whose member wrote one fails with the report.

Run with /usr/bin/python3 (Debian's python3-etcd3 and python3-grpcio).
"""
import atexit
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

# Python's gRPC waits at every fork (each subprocess: etcdctl, chromium, the
# members) for its thread pool to go idle, and under load that wait was seen
# to hang a test process for its whole timeout ("Waiting for thread pool to
# idle before forking"). No child of a test uses gRPC (each execs at once),
# so the fork handlers are off. scripts/test.sh and checks.sh set it too, for
# test files that import grpc before this module.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import grpc  # noqa: E402
import etcd3  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

def _etcd36_dir():
    """etcd 3.6's bin dir: $ETCD36_DIR (CMake sets it), else scripts/etcd36.sh
    (a cache hit once setup has run)."""
    d = os.environ.get("ETCD36_DIR")
    if d:
        return d
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run(["bash", os.path.join(root, "scripts", "etcd36.sh")], check=True,
                          stdout=subprocess.PIPE, text=True).stdout.strip()


ETCD36_DIR = _etcd36_dir()
ORACLE = os.path.join(ETCD36_DIR, "etcd")
ETCDCTL = os.path.join(ETCD36_DIR, "etcdctl")
ETCDUTL = os.path.join(ETCD36_DIR, "etcdutl")
ETCD34 = "/usr/bin/etcd"
ETCDCTL34 = "/usr/bin/etcdctl"
DEFAULT_BINARY = ORACLE
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 40

# Reconnect quickly after a restart (gRPC's default backoff grows to 120 s) and
# accept big Range answers (a durability check reads every key at once).
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    # Also gRPC's minimum connect timeout: 100 ms timed out handshakes on a busy 2-core machine.
    ("grpc.min_reconnect_backoff_ms", 2000),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
]

_live_members = set()
_live_lock = threading.RLock()   # re-entrant: the signal handler may interrupt a holder
_used_ports = set()


def binary_under_test():
    return os.environ.get("ETCDQ_BIN") or DEFAULT_BINARY


def is_reference_etcd():
    """True when the binary under test is the oracle itself (etcd 3.6)."""
    return os.path.realpath(binary_under_test()) == os.path.realpath(DEFAULT_BINARY)


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback port nobody listens on now; never 2379/2380, never handed out twice.

    Taken below the kernel's ephemeral range: a port from that range can become the
    source port of any outgoing connection on the machine (a client of another test)
    between the moment it is picked and a member's restart, and the member's bind
    then fails with "Address already in use" (seen in the suite under load)."""
    low = max(10000, min(_ephemeral_low(), 65536) - 12000)
    high = min(_ephemeral_low(), 65536) - 1
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(low, high) if high > low else 0
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            port = s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
        if port in (2379, 2380) or port in _used_ports:
            continue
        _used_ports.add(port)
        return port
    raise RuntimeError("no free loopback port found")


def all_keys_request(**kw):
    """A RangeRequest covering every key ([\\0, \\0) means 'all keys' in etcd)."""
    return rpc_pb2.RangeRequest(key=b"\0", range_end=b"\0", **kw)


def quiet_closed_etcd3_watchers():
    """python-etcd3's watcher thread reopens its stream forever; once a test
    closes the client's channel it dies of "Channel closed". That is the
    library's way to stop, not a failure: keep it out of the output and
    print any other thread exception as usual."""
    default = threading.excepthook

    def hook(args):
        if (args.thread is not None and args.thread.name.startswith("etcd3_watch_")
                and isinstance(args.exc_value, ValueError) and "Channel closed" in str(args.exc_value)):
            return
        default(args)
    threading.excepthook = hook


class MemberStartError(RuntimeError):
    pass


class Member:
    """One single-voter member of its own cluster, on fresh loopback ports and a fresh data dir."""

    def __init__(self, extra_args=(), name="default", binary=None, start=True):
        self.binary = binary or binary_under_test()
        self.name = name
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="etcdq-it-%s-" % name)
        self.data_dir = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "server.log")
        self.client_port = free_port()
        self.peer_port = free_port()
        self.client_url = "http://127.0.0.1:%d" % self.client_port
        self.peer_url = "http://127.0.0.1:%d" % self.peer_port
        self.endpoint = "127.0.0.1:%d" % self.client_port
        self.proc = None
        self.pids = []            # every process started, for sanitizer_reports()
        self.starts = 0
        self.forced_kills = 0     # stops that needed SIGKILL after SIGTERM timed out
        self._channels = []
        self._clients = []
        self._log = None
        with _live_lock:
            _live_members.add(self)
        if start:
            try:
                self.start()
            except BaseException:
                self.cleanup()
                raise

    # ---- process lifecycle -------------------------------------------------

    def args(self):
        return [self.binary,
                "--name", self.name,
                "--data-dir", self.data_dir,
                "--listen-client-urls", self.client_url,
                "--advertise-client-urls", self.client_url,
                "--listen-peer-urls", self.peer_url,
                "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", "%s=%s" % (self.name, self.peer_url),
                ] + self.extra_args

    def start(self, timeout=START_TIMEOUT_S, wait=True):
        """Starts the process and returns once a Range succeeds (with `wait`: an anonymous Range
        cannot succeed once auth is on); raises with the log tail otherwise."""
        if self.running():
            raise RuntimeError("member %s already running (pid %d)" % (self.name, self.proc.pid))
        self.starts += 1
        if self._log is None:
            self._log = open(self.log_path, "ab", buffering=0)
        self._log.write(("\n==== harness: start #%d at %s: %s\n" % (
            self.starts, time.strftime("%H:%M:%S"), " ".join(self.args()))).encode())
        self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.pids.append(self.proc.pid)
        if wait:
            self.wait_serving(timeout)

    def wait_serving(self, timeout=START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise MemberStartError("%s exited with status %s while starting\n%s" % (
                    self.binary, self.proc.returncode, self.log_tail()))
            # A new channel per attempt: a channel that failed to connect waits out its backoff.
            ch = self.probe_channel()
            try:
                rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=b"harness-probe"), timeout=1.0)
                return
            except grpc.RpcError as e:
                last_error = "%s: %s" % (e.code(), e.details())
            finally:
                ch.close()
            time.sleep(0.05)
        tail = self.log_tail()
        self._kill_process()
        raise MemberStartError("%s did not serve within %.0f s (last error: %s)\n%s" % (
            self.binary, timeout, last_error, tail))

    def probe_channel(self):
        """A new channel for wait_serving's probe (tlslib.TlsMember's is a TLS one)."""
        return grpc.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM, wait up to `timeout` s, then SIGKILL. Returns the exit status (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.forced_kills += 1
                self._log_note("did not exit %.0f s after SIGTERM; SIGKILL" % timeout)
                self._kill_process()
        self._log_note("stopped, exit status %s" % self.proc.returncode)
        return self.proc.returncode

    def kill9(self):
        """SIGKILL at once, like a power cut for the process (the page cache survives)."""
        if self.proc is not None and self.proc.poll() is None:
            self._kill_process()
            self._log_note("SIGKILLed")

    def restart(self, timeout=START_TIMEOUT_S, extra_args=None):
        """Stops the process if it runs (SIGTERM), then starts it on the same data dir and ports."""
        if self.running():
            self.stop()
        if extra_args is not None:
            self.extra_args = list(extra_args)
        self.start(timeout)

    def _kill_process(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session's group: the server and any child
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait()

    def _log_note(self, text):
        if self._log is not None and not self._log.closed:
            self._log.write(("==== harness: %s at %s\n" % (text, time.strftime("%H:%M:%S"))).encode())

    def cleanup(self):
        """Kills the process, closes channels, removes the temp dir. Safe to call twice."""
        self._kill_process()
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        for ch in self._channels:
            try:
                ch.close()
            except Exception:
                pass
        self._clients, self._channels = [], []
        if self._log is not None:
            self._log.close()
        if os.environ.get("ETCDQ_KEEP_TEST_DIRS"):
            sys.stderr.write("harness: kept %s\n" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        with _live_lock:
            _live_members.discard(self)

    # ---- logs ----------------------------------------------------------------

    def log_tail(self, lines=LOG_TAIL_LINES):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            return "(no log: %s)" % e
        tail = text.splitlines()[-lines:]
        return "---- last %d lines of %s ----\n%s\n---- end of log ----" % (
            len(tail), self.log_path, "\n".join(tail))

    def sanitizer_reports(self):
        """The text of every sanitizer report this member's processes wrote (see the module doc)."""
        return sanitizer_reports(self.pids)

    # ---- clients ---------------------------------------------------------------

    def channel(self):
        ch = grpc.insecure_channel(self.endpoint, options=CHANNEL_OPTIONS)
        self._channels.append(ch)
        return ch

    def kv(self, channel=None):
        return rpc_pb2_grpc.KVStub(channel or self.channel())

    def maintenance(self, channel=None):
        return rpc_pb2_grpc.MaintenanceStub(channel or self.channel())

    def lease_stub(self, channel=None):
        return rpc_pb2_grpc.LeaseStub(channel or self.channel())

    def client(self, timeout=10):
        c = etcd3.client(host="127.0.0.1", port=self.client_port, timeout=timeout,
                         grpc_options=CHANNEL_OPTIONS)
        self._clients.append(c)
        return c

    def __repr__(self):
        return "Member(%s, %s, pid=%s)" % (self.name, self.endpoint,
                                           self.proc.pid if self.proc else None)


def vm_rss_mib(pid):
    """The resident set size of process `pid`, in MiB (0 if it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def refusal_text(output):
    """What a member that refused to start said, decoded: the "error" field of
    each JSON log line that has one (etcd 3.6 logs a refusal as zap lines:
    "failed to verify flags" at warn, "discovery failed" at fatal), the "msg"
    of a fatal line without one (etcdq's reason for a start that failed), then
    each line that is not JSON (Go's flag package prints its errors plain),
    one a line."""
    out = []
    for line in output.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if isinstance(entry, dict) and "error" in entry:
            out.append(str(entry["error"]))
        elif isinstance(entry, dict) and entry.get("level") == "fatal" and "msg" in entry:
            out.append(str(entry["msg"]))
    return "\n".join(out)


def clean_exit_status():
    """A member's exit status after a SIGTERM it handled: 0 for etcdq; etcd (3.4
    and 3.6) re-raises the signal once it has stopped (osutil.HandleInterrupts)."""
    return -signal.SIGTERM if is_reference_etcd() else 0


def sanitized():
    """True when the binary under test is a sanitizer build (scripts/checks.sh):
    timings and memory figures are then the sanitizer's, not etcdq's."""
    return bool(os.environ.get("ETCDQ_SANITIZER_REPORTS"))


def sanitizer_reports(pids):
    """Reports under $ETCDQ_SANITIZER_REPORTS written by any of `pids` (files <tool>.<pid>)."""
    d = os.environ.get("ETCDQ_SANITIZER_REPORTS")
    if not d or not os.path.isdir(d):
        return []
    wanted = {str(p) for p in pids}
    out = []
    for name in sorted(os.listdir(d)):
        if name.rsplit(".", 1)[-1] in wanted:
            with open(os.path.join(d, name), "rb") as f:
                out.append("%s:\n%s" % (name, f.read(20000).decode("utf-8", "replace")))
    return out


def _cleanup_all():
    with _live_lock:
        members = list(_live_members)
    for m in members:
        try:
            m.cleanup()
        except Exception:
            pass


atexit.register(_cleanup_all)


def _cleanup_and_die(signum, _frame):
    # Servers run in their own sessions, so a runner's SIGTERM/SIGINT/SIGHUP (a ctest
    # timeout, Ctrl-C) does not reach them: kill them here, then die of the same signal.
    # (Raising SystemExit instead would not do: unittest records it as one test's error
    # and goes on with the next test.)
    _cleanup_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


for _sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    if signal.getsignal(_sig) in (signal.SIG_DFL, signal.default_int_handler):
        signal.signal(_sig, _cleanup_and_die)


class CleanupTestCase(unittest.TestCase):
    """A TestCase that stops what it started: things passed to self.track() go
    after the test, to cls.track_class() (in setUpClass) after the class, each
    with cleanup(); when a test fails, log_text() of every one of them is
    printed to stderr first."""

    def track(self, thing):
        self._tracked.append(thing)
        return thing

    @classmethod
    def track_class(cls, thing):
        if "_class_tracked" not in cls.__dict__:
            cls._class_tracked = []
        cls._class_tracked.append(thing)
        return thing

    def log_text(self, thing):
        return repr(thing)

    @classmethod
    def tearDownClass(cls):
        for t in cls.__dict__.get("_class_tracked", ()):
            t.cleanup()
        super().tearDownClass()

    def run(self, result=None):
        if result is None:
            result = self.defaultTestResult()
        self._tracked = []
        before = len(result.failures) + len(result.errors)
        try:
            return super().run(result)
        finally:
            try:
                if len(result.failures) + len(result.errors) > before:
                    for t in self._tracked + list(type(self).__dict__.get("_class_tracked", ())):
                        sys.stderr.write("\n%s: %s\n" % (self.id(), self.log_text(t)))
            finally:
                for t in self._tracked:
                    t.cleanup()
                self._report_sanitizers(result)
                self._tracked = []

    def _report_sanitizers(self, result):
        reports = []
        for t in self._tracked:
            if hasattr(t, "sanitizer_reports"):
                reports += t.sanitizer_reports()
        if reports:
            try:
                raise AssertionError("sanitizer report from a member:\n" + "\n".join(reports))
            except AssertionError:
                result.addFailure(self, sys.exc_info())


class MemberTestCase(CleanupTestCase):
    """A TestCase whose members are cleaned up after each test or class, with their
    log tails printed to stderr when the test fails.

    self.new_member(...) -> a member for this test only.
    cls.new_class_member(...) (in setUpClass) -> one shared by the class.
    """

    @classmethod
    def new_class_member(cls, *args, **kwargs):
        return cls.track_class(Member(*args, **kwargs))

    def new_member(self, *args, **kwargs):
        return self.track(Member(*args, **kwargs))

    def log_text(self, m):
        return "log of %r\n%s" % (m, m.log_tail())


def main():
    """unittest.main with verbose output; exits non-zero when any test fails."""
    t0 = time.monotonic()
    sys.stderr.write("binary under test: %s\n" % binary_under_test())
    prog = unittest.main(verbosity=2, exit=False)
    sys.stderr.write("wall time: %.1f s\n" % (time.monotonic() - t0))
    sys.exit(0 if prog.result.wasSuccessful() else 1)
