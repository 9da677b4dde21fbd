// A watch stream's requests as etcd's v3rpc watch server reads them
// (server/etcdserver/api/v3rpc/watch.go recvLoop): decoding, and what a
// create asks for and whether it is refused. The stream (watch_stream.h)
// acts on them.
//
// Thread-safety: pure functions of their arguments (watch_permitted reads
// the auth store, which is safe from any thread).
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>

#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "server/context.h"

namespace etcdq::server {

// Parses one message of the stream. A message that is not a WatchRequest
// ends the stream with the status returned (INTERNAL, grpc-go's words), as
// grpc-go ends etcd's stream on a message it cannot unmarshal.
grpc::Status decode_watch_request(grpc::ByteBuffer* buf, etcdserverpb::WatchRequest* out);

// etcd's isWatchPermitted: READ over the watched range (true while auth
// is off). `cred`: who the stream says it is.
bool watch_permitted(const Context& ctx, const Credentials& cred, const etcdserverpb::WatchCreateRequest& c);

// etcd's reason to refuse a create before it takes an id, as the cancel
// reason of the `canceled` response it gets (watch_id -1): an empty range
// ("mvcc: watcher range is empty"), then a permission denied (the gRPC
// error's text). "": not refused.
std::string create_refusal(const etcdserverpb::WatchCreateRequest& c, bool permitted);

// The size past which a watcher that asked for fragments gets its events
// in parts: --max-request-bytes plus the 512 KiB allowance
// (grpcOverheadBytes in v3rpc's watch server), what etcd's gRPC limit
// could not carry.
int64_t fragment_limit(const Context& ctx);

}  // namespace etcdq::server
