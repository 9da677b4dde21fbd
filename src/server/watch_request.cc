#include "server/watch_request.h"

#include <grpcpp/impl/codegen/proto_utils.h>

namespace etcdq::server {

using etcdserverpb::WatchCreateRequest;

grpc::Status decode_watch_request(grpc::ByteBuffer* buf, etcdserverpb::WatchRequest* out) {
  if (grpc::SerializationTraits<etcdserverpb::WatchRequest>::Deserialize(buf, out).ok()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INTERNAL,
                      "grpc: failed to unmarshal the received message proto: cannot parse invalid wire-format data");
}

bool watch_permitted(const Context& ctx, const Credentials& cred, const WatchCreateRequest& c) {
  if (!member::auth_enabled(ctx)) return true;
  member::Caller who;
  if (caller_of(ctx, cred, &who)) return false;
  return !member::check_read(ctx, who, c.key(), c.range_end());
}

std::string create_refusal(const WatchCreateRequest& c, bool permitted) {
  const std::string& end = c.range_end();
  bool from_key = end.size() == 1 && end[0] == '\0';
  if (!end.empty() && !from_key && c.key() >= end) return "mvcc: watcher range is empty";
  // etcd's cancel reason is the gRPC error's text.
  if (!permitted) return "rpc error: code = PermissionDenied desc = " + errors::permission_denied().message();
  return "";
}

int64_t fragment_limit(const Context& ctx) { return ctx.limits.max_request_bytes + 512 * 1024; }

}  // namespace etcdq::server
