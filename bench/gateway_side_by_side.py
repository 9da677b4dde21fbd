#!/usr/bin/python3
"""The JSON gateway under load: put and range through POST /v3/kv/... at 1000
keep-alive HTTP/1.1 connections (wrk, Debian's package), against a fresh
single member of Debian's etcd 3.4 and of etcdq, alternating A B A B, in one
run. Prints a table of medians and, with --out, appends it to that file.

    /usr/bin/python3 bench/gateway_side_by_side.py [--etcdq build/etcdq] [--rounds 2] [--seconds 10]

Workloads (wrk -t2 -c1000, each connection one request at a time):
  put   PutRequest of one of 1000 keys (8 bytes), value 256 bytes
  range RangeRequest of one of those keys, linearizable (the default)
wrk counts a non-2xx answer or a closed connection as an error; both are
reported.
"""
import argparse, base64, datetime, os, re, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402

KEYS = [base64.b64encode(b"k%07d" % i).decode() for i in range(1000)]
VALUE = base64.b64encode(b"v" * 256).decode()


def lua(kind):
    keys = ",".join('"%s"' % k for k in KEYS)
    if kind == "put":
        body = '\'{"key":"\' .. keys[i] .. \'","value":"%s"}\'' % VALUE
        path = "/v3/kv/put"
    else:
        body = '\'{"key":"\' .. keys[i] .. \'"}\''
        path = "/v3/kv/range"
    return """
keys = {%s}
n = 0
request = function()
  n = n + 1
  local i = (n %% #keys) + 1
  return wrk.format("POST", "%s", {["Content-Type"] = "application/json"}, %s)
end
""" % (keys, path, body)


def parse(out):
    def num(pat, conv=float):
        m = re.search(pat, out)
        return conv(m.group(1)) if m else 0

    def ms(s):
        v, unit = re.match(r"([\d.]+)(us|ms|s)", s).groups()
        return float(v) * {"us": 0.001, "ms": 1, "s": 1000}[unit]

    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M))
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    errors += num(r"Non-2xx or 3xx responses: (\d+)", int)
    return {"rps": num(r"Requests/sec:\s+([\d.]+)"), "p50": ms(lat.get("50", "0us")),
            "p99": ms(lat.get("99", "0us")), "errors": errors}


def run(binary, kind, seconds, script_dir):
    m = harness.Member(binary=binary)
    try:
        script = os.path.join(script_dir, kind + ".lua")
        with open(script, "w") as f:
            f.write(lua(kind))
        if kind == "range":  # the keys exist
            subprocess.run(["wrk", "-t1", "-c10", "-d2s", "-s", os.path.join(script_dir, "put.lua"),
                            m.client_url], capture_output=True, check=True)
        out = subprocess.run(["wrk", "-t2", "-c1000", "-d%ds" % seconds, "--latency", "-s", script, m.client_url],
                             capture_output=True, text=True, check=True).stdout
        r = parse(out)
        r["rss_mib"] = harness_rss(m)
        return r
    finally:
        m.cleanup()


def harness_rss(m):
    try:
        with open("/proc/%d/status" % m.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def emit(lines, out):
    """Prints a result table and appends it to the file `out` (if given)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "a") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etcdq", default=os.path.join(ROOT, "build", "etcdq"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    servers = [("etcd 3.4", "/usr/bin/etcd"), ("etcdq", a.etcdq)]
    results = {}
    with tempfile.TemporaryDirectory() as d:
        # put.lua first: the range runs load their keys with it
        with open(os.path.join(d, "put.lua"), "w") as f:
            f.write(lua("put"))
        for rnd in range(a.rounds):
            for kind in ("put", "range"):
                for name, binary in servers:
                    r = run(binary, kind, a.seconds, d)
                    print("round %d %-5s %-8s %s" % (rnd + 1, kind, name, r), flush=True)
                    results.setdefault((kind, name), []).append(r)
    lines = ["", "## JSON gateway: put and range at 1000 HTTP clients, etcd 3.4.23 against etcdq (%s)" %
             datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "",
             "`/usr/bin/python3 bench/gateway_side_by_side.py --rounds %d --seconds %d`: wrk -t2 -c1000 "
             "(keep-alive, one request in flight per connection), 1000 keys of 8 B, values of 256 B, "
             "a fresh single member each run, medians of %d rounds. 2-core machine shared with other jobs." %
             (a.rounds, a.seconds, a.rounds), "",
             "| workload | server | req/s | p50 ms | p99 ms | errors | peak RSS MiB |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (kind, name), rs in results.items():
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        lines.append("| %s | %s | %.0f | %.1f | %.1f | %d | %d |" % (
            kind, name, med("rps"), med("p50"), med("p99"), med("errors"), med("rss_mib")))
    emit(lines, a.out)


if __name__ == "__main__":
    main()
