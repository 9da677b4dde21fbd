#!/usr/bin/python3
"""Runs ../shared/difftest/difftest.py and reruns it once, only when every
difference it reported is the tool's own port renaming cutting into a number.

difftest.py renames the client and peer port numbers in etcdctl's output to
{client-port}/{peer-port} by plain substring replacement. A member id (a hash
of the peer URL, different on every run) that happens to contain the port's
digits is cut in two, the JSON no longer parses, and the step is compared as
text: a difference that says nothing about the server (CI, 2026-12-01:
"member_id":424{peer-port}28543724306). A rerun takes new ports and so a new
member id. Any other difference fails at once, and a second failure fails.
"""
import re
import subprocess
import sys

CUT = re.compile(r"\d\{(?:client|peer)-port\}|\{(?:client|peer)-port\}\d")


def run(args):
    p = subprocess.run([sys.executable] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(p.stdout)
    sys.stdout.flush()
    return p.returncode, p.stdout


def only_port_cuts(output):
    """True when the run reported at least one differing step and each one
    holds a port name glued to a digit, on either side."""
    steps = re.split(r"\n(?=  step \d+:)", output)[1:]
    return bool(steps) and all(CUT.search(s) for s in steps)


def main():
    code, out = run(sys.argv[1:])
    if code != 0 and only_port_cuts(out):
        print("difftest_rerun: every difference is the difftest's port renaming cutting into a "
              "member id; running once more with new ports", flush=True)
        code, _ = run(sys.argv[1:])
    return code


if __name__ == "__main__":
    sys.exit(main())
