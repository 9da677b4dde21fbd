#!/usr/bin/python3
"""Put throughput with auth on (simple token; a user with READWRITE over every
key) against auth off, etcdq and Debian's etcd 3.4 side by side, with etcd's
own benchmark tool (issue #13's measurement).

    /usr/bin/python3 bench/auth_put.py --etcdq build/etcdq [--benchmark /tmp/etcd-benchmark]
        [--clients 1000] [--total 100000] [--rounds 1]

Each run: a fresh one-member server (loopback, temp data dir); for auth on,
root and a user "bench" (role "all": READWRITE over [\\0, everything)) are
created and auth enabled, then `benchmark --user bench:pw put` runs with
--conns=min(100, clients) (each connection authenticates once, bcrypt at the
default cost 10 on both servers).
"""
import argparse, os, re, shutil, socket, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc, auth_pb2  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(binary):
    d = tempfile.mkdtemp(prefix="auth-bench-", dir="/var/tmp")
    cp, pp = free_port(), free_port()
    cu, pu = "http://127.0.0.1:%d" % cp, "http://127.0.0.1:%d" % pp
    log = open(os.path.join(d, "log"), "w")
    p = subprocess.Popen([binary, "--name", "m", "--data-dir", os.path.join(d, "data"),
                          "--listen-client-urls", cu, "--advertise-client-urls", cu,
                          "--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
                          "--initial-cluster", "m=" + pu], stdout=log, stderr=subprocess.STDOUT)
    ch = grpc.insecure_channel("127.0.0.1:%d" % cp)
    kv = rpc_pb2_grpc.KVStub(ch)
    for _ in range(100):
        try:
            kv.Put(rpc_pb2.PutRequest(key=b"warm", value=b"x"), timeout=1)
            break
        except grpc.RpcError:
            time.sleep(0.2)
    return p, d, cp, ch


def enable_auth(ch):
    a = rpc_pb2_grpc.AuthStub(ch)
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password="rootpw"), timeout=10)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="root"), timeout=10)
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="bench", password="pw"), timeout=10)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="all"), timeout=10)
    a.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(
        name="all", perm=auth_pb2.Permission(permType=auth_pb2.Permission.READWRITE, key=b"\0", range_end=b"\0")),
        timeout=10)
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="bench", role="all"), timeout=10)
    a.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)


def run(binary, label, auth, a):
    p, d, port, ch = start(binary)
    try:
        if auth:
            enable_auth(ch)
        cmd = [a.benchmark, "--endpoints=127.0.0.1:%d" % port, "--conns=%d" % min(100, a.clients),
               "--clients=%d" % a.clients]
        if auth:
            cmd.append("--user=bench:pw")
        cmd += ["put", "--total=%d" % a.total, "--key-size=8", "--val-size=256"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900).stdout
        rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
        p50 = re.search(r"50% in ([\d.]+) secs", out)
        p99 = re.search(r"99% in ([\d.]+) secs", out)
        errs = out.count("error")
        return (label, "on" if auth else "off", float(rps.group(1)) if rps else 0.0,
                float(p50.group(1)) * 1000 if p50 else 0, float(p99.group(1)) * 1000 if p99 else 0, errs)
    finally:
        ch.close()
        p.terminate()
        p.wait(timeout=30)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etcdq", required=True)
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--benchmark", default="/tmp/etcd-benchmark")
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--total", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    print("| server | auth | req/s | p50 ms | p99 ms | error lines |")
    print("| --- | --- | --- | --- | --- | --- |")
    for _ in range(a.rounds):
        for binary, label in ((a.etcd, "etcd 3.4"), (a.etcdq, "etcdq")):
            for auth in (False, True):
                r = run(binary, label, auth, a)
                print("| %s | %s | %.0f | %.1f | %.1f | %d |" % r, flush=True)


if __name__ == "__main__":
    main()
