#include "server/watch_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/slice.h>

#include <cstring>

namespace etcdq::server {
namespace {

using google::protobuf::io::CodedOutputStream;

// Field tags: (number << 3) | wire type (0 varint, 2 length-delimited).
constexpr uint8_t kHeaderTag = (1 << 3) | 2;
constexpr uint8_t kClusterIdTag = (1 << 3) | 0;
constexpr uint8_t kMemberIdTag = (2 << 3) | 0;
constexpr uint8_t kRevisionTag = (3 << 3) | 0;
constexpr uint8_t kRaftTermTag = (4 << 3) | 0;
constexpr uint8_t kWatchIdTag = (2 << 3) | 0;
constexpr uint8_t kFragmentTag = (7 << 3) | 0;
constexpr uint8_t kEventsTag = (11 << 3) | 2;

uint8_t* put_varint_field(uint8_t tag, uint64_t v, uint8_t* p) {
  if (v == 0) return p;  // proto3 leaves defaults out
  *p++ = tag;
  return CodedOutputStream::WriteVarint64ToArray(v, p);
}

// Header, watch_id and fragment: what precedes the events. Returns the end.
uint8_t* put_prefix(const WireHeader& h, int64_t watch_id, bool fragment, uint8_t* p) {
  uint8_t hdr[48];
  uint8_t* e = hdr;
  e = put_varint_field(kClusterIdTag, h.cluster_id, e);
  e = put_varint_field(kMemberIdTag, h.member_id, e);
  e = put_varint_field(kRevisionTag, static_cast<uint64_t>(h.revision), e);
  e = put_varint_field(kRaftTermTag, h.raft_term, e);
  *p++ = kHeaderTag;
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(e - hdr), p);
  std::memcpy(p, hdr, static_cast<size_t>(e - hdr));
  p += e - hdr;
  p = put_varint_field(kWatchIdTag, static_cast<uint64_t>(watch_id), p);
  if (fragment) {
    *p++ = kFragmentTag;
    *p++ = 1;
  }
  return p;
}

void free_string(void* s) { delete static_cast<std::string*>(s); }

}  // namespace

void append_event_field(std::string* body, std::string_view event) {
  uint8_t pre[1 + 5];
  pre[0] = kEventsTag;
  uint8_t* e = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(event.size()), pre + 1);
  body->append(reinterpret_cast<const char*>(pre), static_cast<size_t>(e - pre));
  body->append(event.data(), event.size());
}

size_t event_field_size(size_t n) { return 1 + CodedOutputStream::VarintSize32(static_cast<uint32_t>(n)) + n; }

grpc::ByteBuffer encode_watch_response(const WireHeader& h, int64_t watch_id, bool fragment, std::string* events) {
  uint8_t prefix[kMaxWirePrefix];
  size_t n = static_cast<size_t>(put_prefix(h, watch_id, fragment, prefix) - prefix);
  if (events->size() >= kShareBodyBytes) {
    // A big body is handed over, not copied: gRPC frees it with the buffer.
    auto* body = new std::string(std::move(*events));
    events->clear();
    grpc::Slice parts[2] = {grpc::Slice(prefix, n),
                            grpc::Slice(body->data(), body->size(), free_string, body)};
    return grpc::ByteBuffer(parts, 2);
  }
  grpc::Slice one(n + events->size());
  auto* p = const_cast<uint8_t*>(one.begin());  // freshly allocated, ours to fill
  std::memcpy(p, prefix, n);
  if (!events->empty()) std::memcpy(p + n, events->data(), events->size());
  return grpc::ByteBuffer(&one, 1);
}

}  // namespace etcdq::server
