#include "server/request_parsing.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"

namespace etcdq::server {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

grpc::Status unmarshal_error(const std::string& why) {
  return grpc::Status(grpc::StatusCode::INTERNAL, "grpc: error unmarshalling request: " + why);
}

// gogoproto's words for the first thing wrong at the top level of `bytes`,
// when the fields there can be walked; a nested fault gets the generic words.
std::string why_not_parsed(std::string_view bytes) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  // A varint that does not end: too long for 64 bits, or cut off.
  auto bad_varint = [&](int left) { return left >= 10 ? "proto: integer overflow" : "unexpected EOF"; };
  while (!in.ExpectAtEnd()) {
    uint64_t tag = 0;
    int left = in.BytesUntilLimit();
    if (!in.ReadVarint64(&tag)) return bad_varint(left);
    int wire_type = static_cast<int>(tag & 7);
    if (wire_type == 4 || wire_type > 5) return "proto: illegal wireType " + std::to_string(wire_type);
    if (tag >> 3 == 0) return "proto: illegal tag 0 (wire type " + std::to_string(wire_type) + ")";
    if (wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint64_t len = 0;
      left = in.BytesUntilLimit();
      if (!in.ReadVarint64(&len)) return bad_varint(left);
      if (len > static_cast<uint64_t>(in.BytesUntilLimit())) return "unexpected EOF";
      in.Skip(static_cast<int>(len));
    } else if (!WireFormatLite::SkipField(&in, static_cast<uint32_t>(tag))) {
      return "unexpected EOF";
    }
  }
  return "proto: cannot parse invalid wire-format data";
}

// How deep txns nest in a serialized TxnRequest (0: no nested txn), walked
// with an explicit stack so that any depth is safe; -1 when the bytes do not
// walk as a TxnRequest.
int64_t txn_nesting_depth(std::string_view txn) {
  struct Item {
    std::string_view bytes;
    bool is_txn;  // a TxnRequest, else a RequestOp
    int64_t depth;
  };
  std::vector<Item> stack{{txn, true, 0}};
  int64_t deepest = 0;
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, it.depth);
    CodedInputStream in(reinterpret_cast<const uint8_t*>(it.bytes.data()), static_cast<int>(it.bytes.size()));
    while (uint32_t tag = in.ReadTag()) {
      uint32_t field = tag >> 3;
      if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        if (!WireFormatLite::SkipField(&in, tag)) return -1;
        continue;
      }
      uint32_t len = 0;
      if (!in.ReadVarint32(&len) || len > static_cast<uint32_t>(in.BytesUntilLimit())) return -1;
      auto start = static_cast<size_t>(in.CurrentPosition());
      std::string_view sub = it.bytes.substr(start, len);
      in.Skip(static_cast<int>(len));
      // TxnRequest: success = 2, failure = 3 (RequestOp); RequestOp: request_txn = 4.
      if (it.is_txn && (field == 2 || field == 3)) stack.push_back({sub, false, it.depth});
      if (!it.is_txn && field == 4) stack.push_back({sub, true, it.depth + 1});
    }
    if (!in.ConsumedEntireMessage() && in.BytesUntilLimit() > 0) return -1;
  }
  return deepest;
}

// The payload's bytes (decompressed); destroys the payload.
bool take_bytes(grpc_byte_buffer* payload, std::string* out) {
  if (payload == nullptr) return false;
  grpc_byte_buffer_reader reader;
  bool ok = grpc_byte_buffer_reader_init(&reader, payload) != 0;
  if (ok) {
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    out->assign(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(all)), GRPC_SLICE_LENGTH(all));
    grpc_slice_unref(all);
    grpc_byte_buffer_reader_destroy(&reader);
  }
  grpc_byte_buffer_destroy(payload);
  return ok;
}

}  // namespace

grpc::Status parse_stream_message(grpc::ByteBuffer* buf, google::protobuf::MessageLite* msg) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buf->Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  buf->Clear();
  if (msg->ParseFromString(bytes)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INTERNAL,
                      "grpc: failed to unmarshal the received message: " + why_not_parsed(bytes));
}

ParseLimits parse_limits(int64_t max_txn_ops) {
  ParseLimits l;
  l.max_txn_ops = max_txn_ops;
  int64_t want = 2 * std::max<int64_t>(max_txn_ops, 0) + 16;
  l.recursion_limit = static_cast<int>(std::clamp<int64_t>(want, 100, member::kv::kMaxRequestNesting));
  return l;
}

grpc::Status parse_request(grpc_byte_buffer* payload, google::protobuf::MessageLite* msg,
                           const ParseLimits& limits) {
  std::string bytes;
  if (!take_bytes(payload, &bytes)) return unmarshal_error("unexpected EOF");
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  in.SetRecursionLimit(limits.recursion_limit);
  if (msg->ParseFromCodedStream(&in) && in.ConsumedEntireMessage()) return grpc::Status::OK;
  // Too deep for the recursion limit: etcd parses any depth, then finds a txn
  // nested past --max-txn-ops too big (each level takes at least one op from
  // what its parent leaves). A nested txn is two messages a level, and its
  // innermost op one or two more.
  if (dynamic_cast<etcdserverpb::TxnRequest*>(msg) != nullptr) {
    int64_t depth = txn_nesting_depth(bytes);
    if (depth >= 0 && 2 * depth + 2 > limits.recursion_limit) {
      Error e = errors::too_many_ops();
      return grpc::Status(static_cast<grpc::StatusCode>(e.code()), e.message());
    }
  }
  return unmarshal_error(why_not_parsed(bytes));
}

namespace internal {
const grpc::Status*& current_parse_error() {
  thread_local const grpc::Status* current = nullptr;
  return current;
}
}  // namespace internal

int service_method_index(std::string_view service, std::string_view method) {
  const auto* s = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  if (s == nullptr) return -1;
  const auto* m = s->FindMethodByName(std::string(method));
  return m == nullptr ? -1 : m->index();
}

std::vector<std::string> service_method_names(std::string_view service) {
  std::vector<std::string> out;
  const auto* s = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  if (s == nullptr) return out;
  for (int i = 0; i < s->method_count(); ++i) out.push_back(s->method(i)->name());
  return out;
}

void abort_bad_service_method(std::string_view service, std::string_view method) {
  spdlog::critical("bug: {}/{} is not a method of that kind with those types", service, method);
  std::abort();
}

}  // namespace etcdq::server
