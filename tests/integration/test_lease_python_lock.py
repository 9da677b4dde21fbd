#!/usr/bin/python3
"""python-etcd3's Lock (Debian's python3-etcd3 0.12) against the member under test.

That Lock uses no Lock service: acquire() grants a lease, then a Txn
"create_revision(/locks/<name>) == 0 -> put /locks/<name> = <uuid> with the
lease, else get", and while it fails it waits on a Watch of the key; release()
is a Txn "value == <uuid> -> delete". So it exercises KV, Lease and Watch.
Expectations were first checked against Debian's etcd 3.4.

Two notes on the client:
- Lock.__enter__ ignores acquire()'s result (False after its 10 s timeout), so
  the tests check lock.is_acquired() inside every critical section instead of
  trusting the with-statement.
- python-etcd3 0.12's acquire() retries through tenacity with a wait callback
  of the old signature wait(previous_attempt_number, delay_since_first_attempt);
  tenacity 8.2 (Debian bookworm) calls wait(retry_state), so the first acquire
  that has to wait dies with "TypeError: Lock.acquire.<locals>.wait() missing 1
  required positional argument" -- on etcd as on any server (upstream
  kragniz/python-etcd3 issue #2149). When the installed tenacity has that
  problem, this file replaces Lock.acquire with the same algorithm without
  tenacity (grant a lease; Txn create_revision == 0 -> put with the lease, else
  get; on failure watch_once the key for the time left; try again until the
  timeout, trying once more after the wait, as tenacity's stop_after_delay
  did). Lock.release, refresh, is_acquired, __enter__ and __exit__ stay
  python-etcd3's own.

    /usr/bin/python3 tests/integration/test_lease_python_lock.py [-k pattern]
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_lease_python_lock.py
"""
import importlib.metadata
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tenacity  # noqa: E402
from etcd3 import exceptions as etcd3_exceptions, locks as etcd3_locks  # noqa: E402

from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402

MIN_TTL = 2
ITERATIONS = int(os.environ.get("LOCK_ITERATIONS", "15"))


def _tenacity_takes_the_old_wait_signature():
    """Whether tenacity still calls wait(previous_attempt_number, delay_since_first_attempt),
    as python-etcd3 0.12's Lock.acquire needs."""
    attempts = []

    @tenacity.retry(retry=tenacity.retry_never, stop=tenacity.stop_after_attempt(2),
                    wait=lambda previous_attempt_number, delay_since_first_attempt: 0)
    def attempt():
        attempts.append(1)
        if len(attempts) == 1:
            raise tenacity.TryAgain
        return True

    try:
        return attempt() is True
    except TypeError:
        return False


def _acquire_without_tenacity(self, timeout=10):
    """python-etcd3 0.12's Lock.acquire, step for step, with the retry loop written out."""
    client = self.etcd_client
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        self.lease = client.lease(self.ttl)
        success, _ = client.transaction(
            compare=[client.transactions.create(self.key) == 0],
            success=[client.transactions.put(self.key, self.uuid, lease=self.lease)],
            failure=[client.transactions.get(self.key)])
        if success is True:
            return True
        self.lease = None
        if deadline is not None and time.monotonic() >= deadline:
            return False
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
        try:
            client.watch_once(self.key, remaining)
        except etcd3_exceptions.WatchTimedOut:
            pass


LOCK_ACQUIRE_PATCHED = not _tenacity_takes_the_old_wait_signature()
if LOCK_ACQUIRE_PATCHED:
    etcd3_locks.Lock.acquire = _acquire_without_tenacity


harness.quiet_closed_etcd3_watchers()


def timing(text):
    sys.stderr.write("LOCK-TIMING %s: %s\n" % (harness.binary_under_test(), text))
    sys.stderr.flush()


class PythonLockTest(harness.MemberTestCase):

    @classmethod
    def setUpClass(cls):
        cls.member = cls.new_class_member()

    def setUp(self):
        self.name = self._testMethodName

    def test_two_threads_contending_for_a_lock_never_overlap_and_lose_no_update(self):
        inside = [0]                       # holders inside the critical section right now
        overlaps = []
        not_acquired = []
        errors = []
        counter = {"value": 0}             # a read-modify-write that loses updates without exclusion
        intervals = []                     # (enter, leave, thread) for the overlap check
        guard = threading.Lock()           # protects the bookkeeping only, never the counter
        start = threading.Barrier(2)

        def worker(tag):
            client = self.member.client()
            try:
                start.wait(10)
                for i in range(ITERATIONS):
                    with client.lock(self.name, ttl=10) as lock:
                        entered = time.monotonic()
                        if not lock.is_acquired():
                            not_acquired.append("%s iteration %d" % (tag, i))
                        with guard:
                            inside[0] += 1
                            if inside[0] != 1:
                                overlaps.append("%s iteration %d saw %d holders" % (tag, i, inside[0]))
                        v = counter["value"]
                        time.sleep(0.02)   # give the other thread every chance to interleave
                        counter["value"] = v + 1
                        with guard:
                            inside[0] -= 1
                        intervals.append((entered, time.monotonic(), tag))
                    time.sleep(0.005)
            except Exception as e:         # noqa: BLE001 - reported by the test
                errors.append("%s: %r" % (tag, e))

        leases = self.member.lease_stub()
        before = {l.ID for l in leases.LeaseLeases(pb.LeaseLeasesRequest(), timeout=10).leases}
        threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in ("A", "B")]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        elapsed = time.monotonic() - t0
        self.assertFalse(any(t.is_alive() for t in threads), "a worker is stuck")
        self.assertEqual(errors, [])
        self.assertEqual(not_acquired, [], "the with-statement ran without holding the lock")
        self.assertEqual(overlaps, [])
        intervals.sort()
        for (s1, e1, t1), (s2, e2, t2) in zip(intervals, intervals[1:]):
            self.assertLessEqual(e1, s2, "critical sections of %s and %s overlap" % (t1, t2))
        self.assertEqual(counter["value"], 2 * ITERATIONS)
        self.assertEqual(len({tag for _, _, tag in intervals}), 2)
        # Every attempt grants a lease (TTL 10 s, none revoked yet): leases beyond one per
        # acquisition are attempts that found the lock taken, so the threads did contend.
        after = {l.ID for l in leases.LeaseLeases(pb.LeaseLeasesRequest(), timeout=10).leases}
        failed_attempts = len(after - before) - 2 * ITERATIONS
        self.assertGreater(failed_attempts, 0, "the two threads never contended")
        # Released at the end: nobody holds it, a third client gets it at once.
        client = self.member.client()
        self.assertEqual(client.get("/locks/" + self.name), (None, None))
        lock = client.lock(self.name, ttl=10)
        self.assertTrue(lock.acquire(timeout=2))
        lock.release()
        timing("%d acquisitions, %d attempts that found the lock taken, in %.2f s"
               % (2 * ITERATIONS, failed_attempts, elapsed))

    def test_lock_key_carries_the_holders_lease_and_is_deleted_on_release(self):
        client = self.member.client()
        with client.lock(self.name, ttl=30) as lock:
            self.assertTrue(lock.is_acquired())
            value, meta = client.get("/locks/" + self.name)
            self.assertEqual(value, lock.uuid)
            self.assertEqual(meta.lease_id, lock.lease.id)
            info = client.get_lease_info(lock.lease.id)
            self.assertEqual(info.grantedTTL, 30)
            self.assertEqual(list(info.keys), [("/locks/" + self.name).encode()])
            other = self.member.client().lock(self.name, ttl=30)
            self.assertFalse(other.acquire(timeout=1))
            self.assertFalse(other.is_acquired())
            self.assertFalse(other.release())          # the other's release must not free it
            self.assertTrue(lock.is_acquired())
        self.assertEqual(client.get("/locks/" + self.name), (None, None))

    def test_lock_is_released_when_the_with_block_raises(self):
        client = self.member.client()
        with self.assertRaises(ZeroDivisionError):
            with client.lock(self.name, ttl=30) as lock:
                self.assertTrue(lock.is_acquired())
                1 / 0
        self.assertEqual(client.get("/locks/" + self.name), (None, None))
        other = self.member.client().lock(self.name, ttl=30)
        self.assertTrue(other.acquire(timeout=2))
        other.release()

    def test_waiter_acquires_soon_after_the_holder_releases(self):
        holder = self.member.client().lock(self.name, ttl=30)
        self.assertTrue(holder.acquire(timeout=2))
        waiter_client = self.member.client()
        acquired_at = []

        def wait():
            lock = waiter_client.lock(self.name, ttl=30)
            if lock.acquire(timeout=10):
                acquired_at.append(time.monotonic())
                lock.release()

        t = threading.Thread(target=wait, daemon=True)
        t.start()
        time.sleep(1.0)
        self.assertEqual(acquired_at, [])
        released = time.monotonic()
        self.assertTrue(holder.release())
        t.join(15)
        self.assertEqual(len(acquired_at), 1, "the waiter never got the lock")
        timing("waiter got the lock %.3f s after release" % (acquired_at[0] - released))
        self.assertLess(acquired_at[0] - released, 1.0)

    def test_lock_expires_when_the_holders_lease_is_not_refreshed(self):
        holder_client = self.member.client()
        holder = holder_client.lock(self.name, ttl=MIN_TTL)
        # The TTL runs from the lease's grant, which acquire() sends first
        # (then its txn): no earlier than `asked`, no later than `granted`.
        asked = time.monotonic()
        self.assertTrue(holder.acquire(timeout=2))
        granted = time.monotonic()
        waiter = self.member.client().lock(self.name, ttl=30)
        ok = waiter.acquire(timeout=MIN_TTL + 5)
        now = time.monotonic()
        got = now - granted
        timing("lock with TTL %d s taken over %.3f s after the holder acquired it (%.3f s after it asked)"
               % (MIN_TTL, got, now - asked))
        self.assertTrue(ok, "the lock was never freed by its lease expiring")
        self.assertGreaterEqual(now - asked, MIN_TTL, "the lock was freed before its TTL ran out")
        self.assertLessEqual(got, MIN_TTL + 1.5)
        self.assertTrue(waiter.is_acquired())
        self.assertFalse(holder.is_acquired())
        self.assertFalse(holder.release(), "the expired holder's release must not free the new holder's lock")
        self.assertTrue(waiter.is_acquired())
        self.assertEqual(holder_client.get_lease_info(holder.lease.id).TTL, -1)
        waiter.release()

    def test_refreshed_lock_outlives_its_ttl(self):
        holder = self.member.client().lock(self.name, ttl=MIN_TTL)
        self.assertTrue(holder.acquire(timeout=2))
        stop = threading.Event()
        refresh_errors = []

        def refresh():
            while not stop.wait(0.5):
                try:
                    resp = holder.refresh()
                    if [r.TTL for r in resp] != [MIN_TTL]:
                        refresh_errors.append([r.TTL for r in resp])
                except Exception as e:     # noqa: BLE001 - reported by the test
                    refresh_errors.append(repr(e))

        t = threading.Thread(target=refresh, daemon=True)
        t.start()
        try:
            waiter = self.member.client().lock(self.name, ttl=30)
            self.assertFalse(waiter.acquire(timeout=3 * MIN_TTL), "lock taken although its lease was refreshed")
            self.assertTrue(holder.is_acquired())
        finally:
            stop.set()
            t.join(5)
        self.assertEqual(refresh_errors, [])
        self.assertTrue(holder.release())
        self.assertTrue(waiter.acquire(timeout=2))
        waiter.release()


if __name__ == "__main__":
    if LOCK_ACQUIRE_PATCHED:
        sys.stderr.write("note: tenacity %s cannot run python-etcd3 0.12's Lock.acquire retry loop; "
                         "using the same algorithm without tenacity (see the module docstring)\n"
                         % importlib.metadata.version("tenacity"))
    harness.main()
