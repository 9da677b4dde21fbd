#!/usr/bin/python3
"""Range latency during an Authenticate flood (issue #13): bcrypt must not
run on gRPC's threads, where a flood of logins would starve every other RPC.

    /usr/bin/python3 bench/auth_flood.py --binary build/etcdq [--inflight 64] [--seconds 8]

A fresh one-member server (loopback, temp data dir, default --bcrypt-cost
10) with auth on; root's token is taken first. Then Range(key) with that
token, one at a time: `--ranges` of them alone (baseline), and again while
another process keeps `--inflight` Authenticate calls in flight for
`--seconds`. Prints p50/p99/max Range latency in ms for both phases and how
the logins were answered. Bounded: the flood stops after --seconds.
"""
import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402
from auth_put import start  # noqa: E402 (one fresh member, serving)


def flood(endpoint, inflight, seconds, out):
    ch = grpc.insecure_channel(endpoint)
    stub = rpc_pb2_grpc.AuthStub(ch)
    req = rpc_pb2.AuthenticateRequest(name="root", password="rootpw")
    counts = {}
    deadline = time.monotonic() + seconds
    pending = []
    while time.monotonic() < deadline:
        while len(pending) < inflight:
            pending.append(stub.Authenticate.future(req, timeout=30))
        still = []
        for f in pending:
            if f.done():
                try:
                    f.result()
                    k = "OK"
                except grpc.RpcError as e:
                    k = e.code().name
                counts[k] = counts.get(k, 0) + 1
            else:
                still.append(f)
        pending = still
        time.sleep(0.002)
    for f in pending:
        f.cancel()
    out.put(counts)


def percentiles(xs):
    xs = sorted(xs)
    return "p50 %.2f  p99 %.2f  max %.2f ms (n=%d)" % (
        xs[len(xs) // 2] * 1e3, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3, xs[-1] * 1e3, len(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--ranges", type=int, default=300)
    a = ap.parse_args()
    proc, d, cp, ch = start(a.binary)
    try:
        endpoint = "127.0.0.1:%d" % cp
        kv = rpc_pb2_grpc.KVStub(ch)
        auth = rpc_pb2_grpc.AuthStub(ch)
        auth.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password="rootpw"), timeout=10)
        auth.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="root"), timeout=10)
        auth.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
        auth.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)
        token = auth.Authenticate(rpc_pb2.AuthenticateRequest(name="root", password="rootpw"), timeout=10).token
        md = (("token", token),)
        kv.Put(rpc_pb2.PutRequest(key=b"k", value=b"v"), timeout=10, metadata=md)

        def ranges(n, until=None):
            lat = []
            errors = 0
            while len(lat) + errors < n or (until is not None and time.monotonic() < until):
                t0 = time.monotonic()
                try:
                    kv.Range(rpc_pb2.RangeRequest(key=b"k"), timeout=30, metadata=md)
                    lat.append(time.monotonic() - t0)
                except grpc.RpcError:
                    errors += 1
            return lat, errors

        base, _ = ranges(a.ranges)
        q = multiprocessing.Queue()
        p = multiprocessing.Process(target=flood, args=(endpoint, a.inflight, a.seconds, q))
        p.start()
        time.sleep(0.5)  # the flood is under way
        during, errors = ranges(0, until=time.monotonic() + a.seconds - 1)
        counts = q.get(timeout=a.seconds + 60)
        p.join()
        print("binary: %s" % a.binary)
        print("Range alone:                    %s" % percentiles(base))
        print("Range during %3d Authenticates: %s, %d errors" % (a.inflight, percentiles(during), errors))
        print("Authenticate answers during the flood: %s" % counts)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
