// etcdserverpb.WatchResponse written from pre-encoded pieces: the watch
// stream's events are serialized once by the hub (mvcc::HubEvent) and
// copied as bytes into each watcher's response, instead of one protobuf
// message built and serialized per watcher.
//
// The bytes are exactly what protobuf writes for the same WatchResponse
// (fields in number order, proto3 defaults left out; watch_wire_test.cc
// compares them), so clients parse them as any WatchResponse.
//
// Thread-safety: pure functions.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace etcdq::server {

// The ResponseHeader fields of a response (etcdserverpb.ResponseHeader).
struct WireHeader {
  uint64_t cluster_id = 0;
  uint64_t member_id = 0;
  int64_t revision = 0;
  uint64_t raft_term = 0;
};

// Appends one `events` entry (field 11: tag, length, the mvccpb.Event bytes).
void append_event_field(std::string* body, std::string_view event);
// The bytes append_event_field adds for an event of `n` bytes.
size_t event_field_size(size_t n);

// The most bytes encode_watch_response writes before the events.
constexpr size_t kMaxWirePrefix = 96;

// One WatchResponse {header, watch_id, fragment, events} where `events` is
// a run of append_event_field entries, as one message for a raw stream.
// Bodies of at least kShareBodyBytes are not copied: the buffer takes
// `*events` (left empty) and frees it when gRPC is done with it.
grpc::ByteBuffer encode_watch_response(const WireHeader& h, int64_t watch_id, bool fragment, std::string* events);
constexpr size_t kShareBodyBytes = 64 << 10;

}  // namespace etcdq::server
