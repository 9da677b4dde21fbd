"""Raw etcd v3 Watch streams for the watch integration tests (test_watch_*.py).

Debian's python3-etcd3 ships etcd 3.3's rpc.proto: its WatchCreateRequest has no
watch_id or fragment and its WatchRequest no progress_request. The watch tests
need those, so this module declares etcd v3.5's watch messages itself (field
numbers as in etcd's api/etcdserverpb/rpc.proto and api/mvccpb/kv.proto) in a
private descriptor pool, apart from the one python3-etcd3 registers, and calls
/etcdserverpb.Watch/Watch with them. The bytes on the wire are etcd's.

    ws = WatchStream(member.channel())
    ws.create(b"k", prev_kv=True)              # WatchCreateRequest
    created = ws.wait_for(lambda r: r.created)
    ws.cancel(created.watch_id); ws.request_progress(); ws.close()

Every response is kept with the monotonic time it arrived (ws.log), and the
stream's end (ws.done, ws.status) is recorded, so a test can ask for "the
stream ended" as well as for a response.
"""
import queue
import threading
import time

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

WATCH_METHOD = "/etcdserverpb.Watch/Watch"

_F = descriptor_pb2.FieldDescriptorProto


def _message(file_proto, name, fields, enums=(), oneofs=()):
    m = file_proto.message_type.add(name=name)
    for enum_name, values in enums:
        e = m.enum_type.add(name=enum_name)
        for vname, number in values:
            e.value.add(name=vname, number=number)
    for oneof in oneofs:
        m.oneof_decl.add(name=oneof)
    for fname, number, ftype, extra in fields:
        f = m.field.add(name=fname, number=number, type=ftype,
                        label=extra.get("label", _F.LABEL_OPTIONAL))
        if "type_name" in extra:
            f.type_name = extra["type_name"]
        if "oneof" in extra:
            f.oneof_index = extra["oneof"]
    return m


def _build_pool():
    pool = descriptor_pool.DescriptorPool()
    kv = descriptor_pb2.FileDescriptorProto(name="etcdq_tests/mvccpb/kv.proto",
                                            package="mvccpb", syntax="proto3")
    _message(kv, "KeyValue", [
        ("key", 1, _F.TYPE_BYTES, {}),
        ("create_revision", 2, _F.TYPE_INT64, {}),
        ("mod_revision", 3, _F.TYPE_INT64, {}),
        ("version", 4, _F.TYPE_INT64, {}),
        ("value", 5, _F.TYPE_BYTES, {}),
        ("lease", 6, _F.TYPE_INT64, {}),
    ])
    _message(kv, "Event", [
        ("type", 1, _F.TYPE_ENUM, {"type_name": ".mvccpb.Event.EventType"}),
        ("kv", 2, _F.TYPE_MESSAGE, {"type_name": ".mvccpb.KeyValue"}),
        ("prev_kv", 3, _F.TYPE_MESSAGE, {"type_name": ".mvccpb.KeyValue"}),
    ], enums=[("EventType", [("PUT", 0), ("DELETE", 1)])])
    pool.Add(kv)

    rpc = descriptor_pb2.FileDescriptorProto(name="etcdq_tests/etcdserverpb/rpc_watch.proto",
                                             package="etcdserverpb", syntax="proto3",
                                             dependency=[kv.name])
    _message(rpc, "ResponseHeader", [
        ("cluster_id", 1, _F.TYPE_UINT64, {}),
        ("member_id", 2, _F.TYPE_UINT64, {}),
        ("revision", 3, _F.TYPE_INT64, {}),
        ("raft_term", 4, _F.TYPE_UINT64, {}),
    ])
    _message(rpc, "WatchRequest", [
        ("create_request", 1, _F.TYPE_MESSAGE, {"type_name": ".etcdserverpb.WatchCreateRequest", "oneof": 0}),
        ("cancel_request", 2, _F.TYPE_MESSAGE, {"type_name": ".etcdserverpb.WatchCancelRequest", "oneof": 0}),
        ("progress_request", 3, _F.TYPE_MESSAGE,
         {"type_name": ".etcdserverpb.WatchProgressRequest", "oneof": 0}),
    ], oneofs=["request_union"])
    _message(rpc, "WatchCreateRequest", [
        ("key", 1, _F.TYPE_BYTES, {}),
        ("range_end", 2, _F.TYPE_BYTES, {}),
        ("start_revision", 3, _F.TYPE_INT64, {}),
        ("progress_notify", 4, _F.TYPE_BOOL, {}),
        ("filters", 5, _F.TYPE_ENUM, {"type_name": ".etcdserverpb.WatchCreateRequest.FilterType",
                                      "label": _F.LABEL_REPEATED}),
        ("prev_kv", 6, _F.TYPE_BOOL, {}),
        ("watch_id", 7, _F.TYPE_INT64, {}),
        ("fragment", 8, _F.TYPE_BOOL, {}),
    ], enums=[("FilterType", [("NOPUT", 0), ("NODELETE", 1)])])
    _message(rpc, "WatchCancelRequest", [("watch_id", 1, _F.TYPE_INT64, {})])
    _message(rpc, "WatchProgressRequest", [])
    _message(rpc, "WatchResponse", [
        ("header", 1, _F.TYPE_MESSAGE, {"type_name": ".etcdserverpb.ResponseHeader"}),
        ("watch_id", 2, _F.TYPE_INT64, {}),
        ("created", 3, _F.TYPE_BOOL, {}),
        ("canceled", 4, _F.TYPE_BOOL, {}),
        ("compact_revision", 5, _F.TYPE_INT64, {}),
        ("cancel_reason", 6, _F.TYPE_STRING, {}),
        ("fragment", 7, _F.TYPE_BOOL, {}),
        ("events", 11, _F.TYPE_MESSAGE, {"type_name": ".mvccpb.Event", "label": _F.LABEL_REPEATED}),
    ])
    pool.Add(rpc)
    factory = message_factory.MessageFactory(pool)

    def cls(name):
        return factory.GetPrototype(pool.FindMessageTypeByName(name))
    return {n.split(".")[-1]: cls(n) for n in (
        "mvccpb.KeyValue", "mvccpb.Event", "etcdserverpb.ResponseHeader",
        "etcdserverpb.WatchRequest", "etcdserverpb.WatchCreateRequest",
        "etcdserverpb.WatchCancelRequest", "etcdserverpb.WatchProgressRequest",
        "etcdserverpb.WatchResponse")}


_M = _build_pool()
KeyValue = _M["KeyValue"]
Event = _M["Event"]
WatchRequest = _M["WatchRequest"]
WatchCreateRequest = _M["WatchCreateRequest"]
WatchCancelRequest = _M["WatchCancelRequest"]
WatchProgressRequest = _M["WatchProgressRequest"]
WatchResponse = _M["WatchResponse"]

PUT = 0
DELETE = 1
NOPUT = 0
NODELETE = 1
FROM_KEY = b"\0"   # range_end meaning "every key >= key"


def prefix_end(prefix):
    """etcd's range_end for "every key with this prefix" (clientv3.GetPrefixRangeEnd)."""
    p = bytearray(prefix)
    for i in range(len(p) - 1, -1, -1):
        if p[i] < 0xFF:
            p[i] += 1
            return bytes(p[:i + 1])
    return b"\0"


def create_request(key, range_end=b"", start_revision=0, prev_kv=False, filters=(),
                   watch_id=0, progress_notify=False, fragment=False):
    return WatchRequest(create_request=WatchCreateRequest(
        key=key, range_end=range_end, start_revision=start_revision, prev_kv=prev_kv,
        filters=list(filters), watch_id=watch_id, progress_notify=progress_notify,
        fragment=fragment))


def open_call(channel, request_iterator, timeout=None, wait_for_ready=True):
    """The raw bidi call: an iterator of WatchResponse.

    wait_for_ready: the call waits for a connection instead of failing at once when
    the channel's connection attempt failed. harness.CHANNEL_OPTIONS sets
    grpc.min_reconnect_backoff_ms to 100, which gRPC core also takes as its minimum
    connect timeout: on a busy 2-core machine a fresh channel's first handshake then
    sometimes times out ("connection attempt timed out before receiving SETTINGS
    frame", seen with etcd and etcdq alike), and a call that does not wait fails.
    """
    rpc = channel.stream_stream(WATCH_METHOD,
                                request_serializer=WatchRequest.SerializeToString,
                                response_deserializer=WatchResponse.FromString)
    return rpc(request_iterator, timeout=timeout, wait_for_ready=wait_for_ready)


def ready_channel(member, timeout=20.0, options=None):
    """A channel to `member` that is connected (see open_call on why this matters)."""
    if options is None:
        ch = member.channel()
    else:
        ch = grpc.insecure_channel(member.endpoint, options=options)
        member._channels.append(ch)   # closed by member.cleanup()
    grpc.channel_ready_future(ch).result(timeout=timeout)
    return ch


class WatchStream:
    """One Watch call, read by its own thread.

    log: [(monotonic arrival time, WatchResponse)] in arrival order.
    done: the call ended; status: (grpc.StatusCode, details) it ended with
    (StatusCode.OK when the server finished it cleanly).
    on_response(stream, t, response), if given, runs on the reader thread for
    every response before it is logged.
    """

    def __init__(self, channel, on_response=None, read=True, name="watch", wait_for_ready=True):
        self.name = name
        self._requests = queue.Queue()
        self._cond = threading.Condition()
        self.log = []
        self.done = False
        self.done_at = None
        self.status = None
        self.on_response = on_response
        self.call = open_call(channel, self._request_iter(), wait_for_ready=wait_for_ready)
        self._thread = None
        if read:
            self._thread = threading.Thread(target=self._read, name=name, daemon=True)
            self._thread.start()

    def _request_iter(self):
        while True:
            r = self._requests.get()
            if r is None:
                return
            yield r

    def _read(self):
        status = None
        try:
            for r in self.call:
                t = time.monotonic()
                if self.on_response is not None:
                    self.on_response(self, t, r)
                with self._cond:
                    self.log.append((t, r))
                    self._cond.notify_all()
            status = (grpc.StatusCode.OK, "")
        except grpc.RpcError as e:
            status = (e.code(), e.details())
        except Exception as e:  # a bug in on_response: make it visible
            status = ("exception", repr(e))
        with self._cond:
            self.status = status
            self.done = True
            self.done_at = time.monotonic()
            self._cond.notify_all()

    # ---- requests -----------------------------------------------------------

    def send(self, request):
        self._requests.put(request)

    def create(self, key, **kw):
        self.send(create_request(key, **kw))

    def cancel(self, watch_id):
        self.send(WatchRequest(cancel_request=WatchCancelRequest(watch_id=watch_id)))

    def request_progress(self):
        self.send(WatchRequest(progress_request=WatchProgressRequest()))

    def close_send(self):
        """Half-closes the client side (no more requests)."""
        self._requests.put(None)

    def close(self):
        """Cancels the call from the client side."""
        self._requests.put(None)
        self.call.cancel()

    # ---- waiting ---------------------------------------------------------------

    def responses(self):
        with self._cond:
            return [r for _, r in self.log]

    def wait_until(self, predicate, timeout=10.0):
        """Waits until predicate(self) is true (called under the stream's lock); returns its value."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                v = predicate(self)
                if v or self.done:
                    return v
                left = deadline - time.monotonic()
                if left <= 0:
                    return v
                self._cond.wait(left)

    def wait_for(self, match, timeout=10.0, start=0):
        """The first response at index >= start for which match(r) holds, or None on timeout/end."""
        found = self.wait_until(
            lambda s: next((r for _, r in s.log[start:] if match(r)), None) or None, timeout)
        return found

    def wait_done(self, timeout=10.0):
        return self.wait_until(lambda s: s.done, timeout)

    def wait_created(self, count=1, timeout=10.0):
        """The first `count` responses with created set (in order), or fails with AssertionError."""
        got = self.wait_until(lambda s: len([r for _, r in s.log if r.created]) >= count, timeout)
        created = [r for r in self.responses() if r.created]
        if not got:
            raise AssertionError("%s: %d of %d created responses within %.0f s (stream done=%s status=%s)" % (
                self.name, len(created), count, timeout, self.done, self.status))
        return created[:count]

    def events_of(self, watch_id):
        """Every event delivered to watch_id so far, in order."""
        out = []
        for r in self.responses():
            if r.watch_id == watch_id:
                out.extend(r.events)
        return out


def event_tuple(ev, with_prev=True):
    """A comparable, readable form of an Event (or of an etcd3.events.Event's raw event)."""
    kv = ev.kv
    t = ("PUT" if ev.type == PUT else "DELETE", kv.key, kv.value, kv.create_revision,
         kv.mod_revision, kv.version, kv.lease)
    if with_prev:
        if ev.HasField("prev_kv"):
            p = ev.prev_kv
            t += ((p.key, p.value, p.create_revision, p.mod_revision, p.version, p.lease),)
        else:
            t += (None,)
    return t
