// What the gRPC services add to the member's context (member/context.h):
// etcd's status conversion and its interceptor's refusals.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>

#include "member/auth.h"
#include "member/context.h"
#include "member/answers.h"
#include "member/pipeline.h"

namespace etcdq::server {

using member::Context;
using member::Limits;

grpc::Status to_grpc(const Error& e);

// What a call presents to say who makes it: the token in its "token"
// metadata, as etcd's clients send it, or in "authorization" (the JSON
// gateway passes the HTTP header on; etcd's gateway does the same), at most
// 1 KiB of it; else, on a client-cert-auth TLS connection, the verified
// certificate's Common Name (etcd's AuthInfoFromTLS). A stream keeps these
// and resolves them per request (a token can expire while the stream lives).
struct Credentials {
  bool has_token = false;  // an empty token is still a (bad) token, as etcd's
  std::string token;
  std::string common_name;
};
Credentials credentials_of(const grpc::ServerContextBase* call);

// The descriptor gRPC serves `call` on, -1 if not known: every connection
// is handed to gRPC by net/mux.h (or a TLS pump's socketpair end), and gRPC
// names it "fd:N" (it answers "unknown" once the call is canceled).
int socket_fd_of(const grpc::ServerContextBase* call);

// Who presents `cred` (member/auth.h). Auth off: an empty caller. Errors:
// invalid_auth_token() (a bad or expired token); a certificate whose Common
// Name is no user: auth_failed().
Error caller_of(const Context& ctx, const Credentials& cred, member::Caller* out);
// caller_of(credentials_of(call)).
Error caller_of(const Context& ctx, const grpc::ServerContextBase* call, member::Caller* out);

// caller_of, then `check(caller)` when auth is on; the first error.
template <typename Check>
Error check_caller(const Context* ctx, const Credentials& cred, Check check) {
  if (!member::auth_enabled(*ctx)) return {};
  member::Caller who;
  if (Error e = caller_of(*ctx, cred, &who)) return e;
  return check(who);
}
template <typename Check>
Error check_caller(const Context* ctx, const grpc::ServerContextBase* call, Check check) {
  if (!member::auth_enabled(*ctx)) return {};
  return check_caller(ctx, credentials_of(call), check);
}

// Stamps `cmd` with the call's caller (member::stamp); the pipeline checks
// the permission. False when the call was finished here (a bad token).
bool stamp_caller(const Context* ctx, const grpc::ServerContextBase* call, grpc::ServerUnaryReactor* reactor,
                  apply::Command* cmd);

// READ and WRITE over [key, range_end) (etcd's range_end convention) for
// the call's caller: the Lock and Election recipes, checked once on entry
// for every key they may touch (their own proposals are then internal).
Error check_read_write(const Context* ctx, const grpc::ServerContextBase* call, std::string_view key,
                       std::string_view range_end);

// Finishes a unary call with `e`, or OK.
inline void finish(grpc::ServerUnaryReactor* r, const Error& e) { r->Finish(to_grpc(e)); }

// Proposes `cmd` (member/answers.h) and answers the unary call with apply's
// Resp in `resp`, or the error. `after` runs on success, before the answer.
template <class Resp>
void propose_and_answer(Context* ctx, apply::Command cmd, Resp* resp, grpc::ServerUnaryReactor* reactor,
                        std::function<void()> after = {}) {
  member::propose_for<Resp>(*ctx, std::move(cmd),
                            [resp, reactor, after = std::move(after)](member::Answer<Resp>&& a) {
                              if (a.error) return finish(reactor, a.error);
                              if (after) after();
                              resp->Swap(&a.response);
                              finish(reactor, {});
                            });
}

}  // namespace etcdq::server
