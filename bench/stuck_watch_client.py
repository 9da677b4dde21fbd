#!/usr/bin/python3
"""A watch client that never reads: opens one Watch stream to ENDPOINT with
64 prev_kv watchers on the prefix /fan/ (the one etcdq_watch_bench writes)
and sleeps SECONDS without reading a single response. Used to measure what a
stuck client costs the server (bench/RESULTS.md, "isolation").

    bench/stuck_watch_client.py 127.0.0.1:2379 40
"""
import queue
import sys
import time

import grpc
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc

ch = grpc.insecure_channel(sys.argv[1])
requests = queue.Queue()
for _ in range(64):
    requests.put(rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(
        key=b"/fan/", range_end=b"/fan0", prev_kv=True)))


def stream():
    while True:
        yield requests.get()


call = rpc_pb2_grpc.WatchStub(ch).Watch(stream())  # never iterated
time.sleep(float(sys.argv[2]))
