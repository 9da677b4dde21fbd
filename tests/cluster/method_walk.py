"""Every method of every client service etcd serves, called once with an
empty request: what a member answers before a handler's own checks run.

The method list comes from the .proto files under proto/ (protoc's
descriptor set), so a method added there is walked without editing a test.
Requests and responses stay bytes: an empty message is b"" on the wire.
"""
import os
import subprocess
import tempfile

import grpc
from google.protobuf import descriptor_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTOS = ["etcd/api/etcdserverpb/rpc.proto", "etcd/api/v3lock/v3lock.proto", "etcd/api/v3election/v3election.proto"]
# The services on a client URL (src/server/server.cc kClientServices).
CLIENT_SERVICES = {"etcdserverpb.KV", "etcdserverpb.Watch", "etcdserverpb.Lease", "etcdserverpb.Cluster",
                   "etcdserverpb.Maintenance", "etcdserverpb.Auth", "v3lockpb.Lock", "v3electionpb.Election"}


def client_methods():
    """[(path, client_streaming, server_streaming)] for every client method, in .proto order."""
    out = os.path.join(tempfile.mkdtemp(prefix="etcdq-protos-"), "set.pb")
    subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--include_imports",
                    "--descriptor_set_out", out] + PROTOS, check=True)
    fds = descriptor_pb2.FileDescriptorSet.FromString(open(out, "rb").read())
    methods = []
    for f in fds.file:
        for s in f.service:
            name = "%s.%s" % (f.package, s.name)
            if name not in CLIENT_SERVICES:
                continue
            for m in s.method:
                methods.append(("/%s/%s" % (name, m.name), m.client_streaming, m.server_streaming))
    return methods


def call_once(channel, path, client_streaming, server_streaming, metadata=(), timeout=10.0):
    """"<path> <code> <details>" for one call with an empty request (a stream's
    messages are read to its end and not shown)."""
    ident = dict(request_serializer=lambda b: b, response_deserializer=lambda b: b)
    try:
        if client_streaming and server_streaming:
            for _ in channel.stream_stream(path, **ident)(iter([b""]), metadata=metadata, timeout=timeout):
                pass
        elif server_streaming:
            for _ in channel.unary_stream(path, **ident)(b"", metadata=metadata, timeout=timeout):
                pass
        else:
            channel.unary_unary(path, **ident)(b"", metadata=metadata, timeout=timeout)
        return "%s OK" % path
    except grpc.RpcError as e:
        return "%s %s %s" % (path, e.code().name, e.details())


def walk(endpoint, metadata=(), skip=()):
    """call_once for every client method but those in `skip` (paths)."""
    ch = grpc.insecure_channel(endpoint)
    try:
        return [call_once(ch, p, cs, ss, metadata) for p, cs, ss in client_methods() if p not in skip]
    finally:
        ch.close()
