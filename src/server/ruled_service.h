// The one door of every client service: each method a service serves is
// installed through RuledService, which wraps it so that before the
// service's own code runs
//
//   - a unary request is parsed as etcd parses it (request_parsing.h:
//     recursion limit, etcd's unmarshalling errors, too-deep txns), and
//   - the server-wide rules refuse the call (call_rules.h: learner,
//     "hasleader"), streams included.
//
// A service derives from RuledService<Grpc> (Grpc: the generated service,
// etcdserverpb::KV, ...) and installs each method in its constructor with
// unary(), server_stream() or bidi() (raw_bidi() for a method the generated
// class already serves raw, as Watch). unruled_methods() names any method
// of the service left with gRPC's generated handler; ClientServer::start
// refuses to serve when there is one, and tests/cluster/test_call_rules_etcd36.py
// walks every method of every client service on a member with no leader.
//
// Thread-safety: installed from the constructor; immutable once served.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "server/call_rules.h"
#include "server/context.h"
#include "server/request_parsing.h"

namespace etcdq::server {

template <class Grpc, class Base = typename Grpc::CallbackService>
class RuledService : public Base {
 public:
  // "/<service>/<method>" of each method whose handler is not one installed
  // here (none when the service installed every method).
  std::vector<std::string> unruled_methods() {
    std::vector<std::string> out;
    std::vector<std::string> names = service_method_names(Grpc::service_full_name());
    for (size_t i = 0; i < names.size(); ++i) {
      if (ruled_.count(this->GetHandler(static_cast<int>(i))) == 0) {
        out.push_back("/" + std::string(Grpc::service_full_name()) + "/" + names[i]);
      }
    }
    return out;
  }

 protected:
  // `ctx` must outlive the service.
  explicit RuledService(const Context* ctx) : rules_ctx_(ctx) {}

  // A unary method `name` (its name in the .proto). Aborts at start-up if it
  // is not a unary method of this service taking Req and answering Resp.
  template <class Self, class Req, class Resp>
  void unary(std::string_view name,
             grpc::ServerUnaryReactor* (Self::*method)(grpc::CallbackServerContext*, const Req*, Resp*),
             ParseLimits limits = {}) {
    int index = checked_index<grpc::internal::CallbackUnaryHandler<Req, Resp>>(name);
    Self* self = static_cast<Self*>(this);
    const Context* ctx = rules_ctx_;
    auto* h = new UnaryHandler<Req, Resp>(
        [self, method, ctx](grpc::CallbackServerContext* c, const Req* req, Resp* resp) {
          if (Error e = call_refusal(*ctx, c, learner_serves(*req))) {
            auto* reactor = c->DefaultReactor();
            reactor->Finish(to_grpc(e));
            return reactor;
          }
          return (self->*method)(c, req, resp);
        },
        limits);
    install(index, h, /*raw=*/false);
  }

  // A server-streaming method; `learner_ok`: a learner serves it (etcd:
  // Snapshot only).
  template <class Self, class Req, class Resp>
  void server_stream(std::string_view name,
                     grpc::ServerWriteReactor<Resp>* (Self::*method)(grpc::CallbackServerContext*, const Req*),
                     bool learner_ok = false) {
    using Handler = grpc::internal::CallbackServerStreamingHandler<Req, Resp>;
    int index = checked_index<Handler>(name);
    Self* self = static_cast<Self*>(this);
    const Context* ctx = rules_ctx_;
    install(index,
            new Handler([self, method, ctx, learner_ok](grpc::CallbackServerContext* c,
                                                        const Req* req) -> grpc::ServerWriteReactor<Resp>* {
              if (Error e = call_refusal(*ctx, c, learner_ok)) return new Refused<grpc::ServerWriteReactor<Resp>>(e);
              return (self->*method)(c, req);
            }),
            /*raw=*/false);
  }

  // A bidirectional-streaming method (never a learner's).
  template <class Self, class Req, class Resp>
  void bidi(std::string_view name, grpc::ServerBidiReactor<Req, Resp>* (Self::*method)(grpc::CallbackServerContext*)) {
    install(checked_index<grpc::internal::CallbackBidiHandler<Req, Resp>>(name), bidi_handler<Self, Req, Resp>(method),
            /*raw=*/false);
  }
  // The same for a method the generated class serves raw (ByteBuffers).
  template <class Self>
  void raw_bidi(std::string_view name,
                grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* (Self::*method)(grpc::CallbackServerContext*)) {
    using Handler = grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>;
    install(checked_index<Handler>(name), bidi_handler<Self, grpc::ByteBuffer, grpc::ByteBuffer>(method), /*raw=*/true);
  }

 private:
  // A stream refused before it started.
  template <class Reactor>
  class Refused final : public Reactor {
   public:
    explicit Refused(const Error& e) { this->Finish(to_grpc(e)); }
    void OnDone() override { delete this; }
  };

  template <class Self, class Req, class Resp>
  grpc::internal::MethodHandler* bidi_handler(
      grpc::ServerBidiReactor<Req, Resp>* (Self::*method)(grpc::CallbackServerContext*)) {
    Self* self = static_cast<Self*>(this);
    const Context* ctx = rules_ctx_;
    return new grpc::internal::CallbackBidiHandler<Req, Resp>(
        [self, method, ctx](grpc::CallbackServerContext* c) -> grpc::ServerBidiReactor<Req, Resp>* {
          if (Error e = call_refusal(*ctx, c, /*learner_ok=*/false)) {
            return new Refused<grpc::ServerBidiReactor<Req, Resp>>(e);
          }
          return (self->*method)(c);
        });
  }

  // The method's index, after checking that the generated class serves it
  // with a handler of type Generated (so the types given match the .proto).
  template <class Generated>
  int checked_index(std::string_view name) {
    int index = service_method_index(Grpc::service_full_name(), name);
    if (index < 0 || dynamic_cast<Generated*>(this->GetHandler(index)) == nullptr) {
      abort_bad_service_method(Grpc::service_full_name(), name);
    }
    return index;
  }

  void install(int index, grpc::internal::MethodHandler* h, bool raw) {
    if (raw) {
      this->MarkMethodRawCallback(index, h);
    } else {
      this->MarkMethodCallback(index, h);
    }
    ruled_.insert(h);
  }

  const Context* rules_ctx_;
  std::set<const grpc::internal::MethodHandler*> ruled_;
};

}  // namespace etcdq::server
