// How a unary request is parsed, for every etcd service.
//
// gRPC C++'s callback handler parses with protobuf's default recursion limit
// (100 nested messages, about 50 nested txns) and answers a request that
// does not parse with UNIMPLEMENTED and no message. etcd (grpc-go with
// gogoproto) has no depth limit, answers INTERNAL "grpc: error unmarshalling
// request: <why>" for bytes that are not the method's message, and leaves
// deep txns to its --max-txn-ops budget. UnaryHandler replaces the
// generated handler of one method to do the same:
//
//  - the recursion limit is ParseLimits::recursion_limit (enough for a txn
//    nested as deep as --max-txn-ops allows, capped at member::kv::kMaxRequestNesting so
//    that a hostile request cannot exhaust a thread's stack);
//  - a TxnRequest nested too deep for that limit gets etcd's "too many
//    operations in txn request" (InvalidArgument), as etcd answers any txn
//    nested deeper than --max-txn-ops; with --max-txn-ops above about 2000
//    that is also the answer for depths etcd would take;
//  - any other request that does not parse gets INTERNAL with etcd's form
//    of the message (the reason is a best guess at gogoproto's words).
//
// Services install each unary method through ruled_service.h, which
// uses UnaryHandler. Thread-safety: handlers are immutable once the server runs.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "member/kv.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"

namespace etcdq::server {

struct ParseLimits {
  int recursion_limit = 100;
  int64_t max_txn_ops = 128;
};

// --max-txn-ops nested txns, each level two messages, plus the leaves.
ParseLimits parse_limits(int64_t max_txn_ops);

// Parses `payload` (destroyed here; may be null) into `msg`. INTERNAL "grpc: error unmarshalling request: ..."
// when it does not parse; for a TxnRequest nested deeper than max_txn_ops,
// InvalidArgument "etcdserver: too many operations in txn request".
grpc::Status parse_request(grpc_byte_buffer* payload, google::protobuf::MessageLite* msg,
                           const ParseLimits& limits);

// Parses one message of a client stream (`buf`, emptied here) into `msg`.
// One that does not parse ends the stream in etcd (grpc-go's recv) with
// INTERNAL "grpc: failed to unmarshal the received message: <why>", <why>
// a best guess at gogoproto's words as for unary requests. gRPC C++ would
// report it to a typed reactor as the client's half-close (OnReadDone(false)).
grpc::Status parse_stream_message(grpc::ByteBuffer* buf, google::protobuf::MessageLite* msg);

namespace internal {
// The parse error of the request whose method runs on this thread now (set
// by UnaryHandler around the generated handler's RunHandler, which calls the
// method synchronously), or nullptr.
const grpc::Status*& current_parse_error();
}  // namespace internal

template <class Req, class Resp>
class UnaryHandler final : public grpc::internal::MethodHandler {
 public:
  using Method = std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*, const Req*, Resp*)>;

  UnaryHandler(Method method, ParseLimits limits)
      : limits_(limits),
        inner_([method = std::move(method)](grpc::CallbackServerContext* c, const Req* req, Resp* resp) {
          if (const grpc::Status* e = internal::current_parse_error()) {
            auto* reactor = c->DefaultReactor();
            reactor->Finish(*e);
            return reactor;
          }
          return method(c, req, resp);
        }) {}

  // As grpc's CallbackUnaryHandler::Deserialize, with our parse. A request
  // that does not parse is handed on as parsed (empty), its error kept with
  // it, so that RunHandler can answer with that error.
  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status, void** handler_data) override {
    auto* holder = new (grpc::g_core_codegen_interface->grpc_call_arena_alloc(call, sizeof(Holder))) Holder();
    *handler_data = holder;
    holder->error = parse_request(req, holder->request(), limits_);
    if (!holder->error.ok()) holder->request()->Clear();
    *status = grpc::Status::OK;
    return holder->request();
  }

  void RunHandler(const HandlerParameter& param) override {
    auto* holder = static_cast<Holder*>(param.internal_data);
    const grpc::Status*& current = internal::current_parse_error();
    current = holder->error.ok() ? nullptr : &holder->error;
    inner_.RunHandler(param);
    current = nullptr;
  }

 private:
  struct Holder final : grpc::MessageHolder<Req, Resp> {
    Holder() {
      this->set_request(&req);
      this->set_response(&resp);
    }
    void Release() override { this->~Holder(); }  // arena memory, freed with the call
    Req req;
    Resp resp;
    grpc::Status error;
  };

  ParseLimits limits_;
  grpc::internal::CallbackUnaryHandler<Req, Resp> inner_;
};

// The position of `method` in `service` of the generated descriptor pool
// (gRPC registers methods in that order), or -1.
int service_method_index(std::string_view service, std::string_view method);
// The methods of `service` ("etcdserverpb.KV") in that order.
std::vector<std::string> service_method_names(std::string_view service);
[[noreturn]] void abort_bad_service_method(std::string_view service, std::string_view method);

}  // namespace etcdq::server
