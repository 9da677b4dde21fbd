#include "server/auth_service.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "member/reads.h"

namespace etcdq::server {
namespace {

using apply::Command;

// Proposes an auth management command for the call's caller and answers
// with an empty response and a header. `after` runs on success (on the
// apply result's thread) before the answer.
template <typename Resp>
void propose_management(Context* ctx, grpc::CallbackServerContext* c, grpc::ServerUnaryReactor* reactor,
                        Command cmd, Resp* resp, std::function<void()> after = {}) {
  member::Caller caller;
  if (Error e = caller_of(*ctx, c, &caller)) return finish(reactor, e);
  member::stamp(&cmd, caller);
  propose_and_answer(ctx, std::move(cmd), resp, reactor, std::move(after));
}

// A management call whose request is the command as it is (Command's
// field `set`).
template <typename Req, typename Resp>
grpc::ServerUnaryReactor* propose_request(Context* ctx, grpc::CallbackServerContext* c, Req* (Command::*set)(),
                                          const Req& req, Resp* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  *(cmd.*set)() = req;
  propose_management(ctx, c, reactor, std::move(cmd), resp);
  return reactor;
}

// Serves an auth read after the read barrier, with the caller known.
template <typename Read>
void serve_auth_read(Context* ctx, grpc::CallbackServerContext* c, grpc::ServerUnaryReactor* reactor, Read read) {
  member::Caller caller;
  if (Error e = caller_of(*ctx, c, &caller)) return finish(reactor, e);
  member::when_readable(*ctx, member::ReadMode::kLinearizable, [reactor, read, caller = std::move(caller)](Error e) {
    if (e) return finish(reactor, e);
    finish(reactor, read(caller));
  });
}

}  // namespace

AuthService::AuthService(Context* ctx) : RuledService(ctx), ctx_(ctx) {
  unary("AuthEnable", &AuthService::AuthEnable, {});
  unary("AuthDisable", &AuthService::AuthDisable, {});
  unary("AuthStatus", &AuthService::AuthStatus, {});
  unary("Authenticate", &AuthService::Authenticate, {});
  unary("UserAdd", &AuthService::UserAdd, {});
  unary("UserGet", &AuthService::UserGet, {});
  unary("UserList", &AuthService::UserList, {});
  unary("UserDelete", &AuthService::UserDelete, {});
  unary("UserChangePassword", &AuthService::UserChangePassword, {});
  unary("UserGrantRole", &AuthService::UserGrantRole, {});
  unary("UserRevokeRole", &AuthService::UserRevokeRole, {});
  unary("RoleAdd", &AuthService::RoleAdd, {});
  unary("RoleGet", &AuthService::RoleGet, {});
  unary("RoleList", &AuthService::RoleList, {});
  unary("RoleDelete", &AuthService::RoleDelete, {});
  unary("RoleGrantPermission", &AuthService::RoleGrantPermission, {});
  unary("RoleRevokePermission", &AuthService::RoleRevokePermission, {});
}

grpc::ServerUnaryReactor* AuthService::AuthEnable(grpc::CallbackServerContext* c, const etcdserverpb::AuthEnableRequest*,
                                                  etcdserverpb::AuthEnableResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  cmd.mutable_auth_enable();
  propose_management(ctx_, c, reactor, std::move(cmd), resp);
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::AuthDisable(grpc::CallbackServerContext* c,
                                                   const etcdserverpb::AuthDisableRequest*,
                                                   etcdserverpb::AuthDisableResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  cmd.mutable_auth_disable();
  Context* ctx = ctx_;
  // etcd's tokenProvider.disable(): every token of this member dies.
  propose_management(ctx_, c, reactor, std::move(cmd), resp, [ctx] { member::disable_tokens(*ctx); });
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::AuthStatus(grpc::CallbackServerContext* c, const etcdserverpb::AuthStatusRequest*,
                                                  etcdserverpb::AuthStatusResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  member::when_readable(*ctx, member::ReadMode::kLinearizable, [ctx, resp, reactor](Error e) {
    if (e) return finish(reactor, e);
    member::auth_status(*ctx, resp);
    ctx->fill_header(resp->mutable_header());
    finish(reactor, {});
  });
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::Authenticate(grpc::CallbackServerContext* c,
                                                    const etcdserverpb::AuthenticateRequest* req,
                                                    etcdserverpb::AuthenticateResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  run_bcrypt(reactor, [ctx, req, resp, reactor] {
    std::string token;
    if (Error e = member::authenticate(*ctx, req->name(), req->password(), &token)) return finish(reactor, e);
    resp->set_token(std::move(token));
    ctx->fill_header(resp->mutable_header());
    finish(reactor, {});
  });
  return reactor;
}

int AuthService::bcrypt_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency() / 2)); }

void AuthService::run_bcrypt(grpc::ServerUnaryReactor* reactor, std::function<void()> task) {
  if (!bcrypt_->try_post(std::move(task), kMaxQueuedBcrypt)) finish(reactor, errors::too_many_requests());
}

template <typename Resp>
void AuthService::hash_then_propose(grpc::CallbackServerContext* c, grpc::ServerUnaryReactor* reactor, Command cmd,
                                    const std::string* password, std::string* (*hashed)(Command&), Resp* resp) {
  Context* ctx = ctx_;
  run_bcrypt(reactor, [ctx, c, password, hashed, resp, reactor, cmd = std::move(cmd)]() mutable {
    std::string hash;
    if (Error e = member::hash_password(*ctx, *password, &hash)) return finish(reactor, e);
    *hashed(cmd) = std::move(hash);
    propose_management(ctx, c, reactor, std::move(cmd), resp);
  });
}

grpc::ServerUnaryReactor* AuthService::UserAdd(grpc::CallbackServerContext* c, const etcdserverpb::AuthUserAddRequest* req,
                                               etcdserverpb::AuthUserAddResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  auto* add = cmd.mutable_user_add();
  add->set_name(req->name());
  if (req->has_options()) *add->mutable_options() = req->options();
  if (req->name().empty()) {
    finish(reactor, errors::user_empty());
    return reactor;
  }
  if ((req->has_options() && req->options().no_password()) || !req->hashedpassword().empty()) {
    if (!(req->has_options() && req->options().no_password())) add->set_hashedpassword(req->hashedpassword());
    propose_management(ctx_, c, reactor, std::move(cmd), resp);
    return reactor;
  }
  hash_then_propose(c, reactor, std::move(cmd), &req->password(),
                    [](Command& m) { return m.mutable_user_add()->mutable_hashedpassword(); }, resp);
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::UserGet(grpc::CallbackServerContext* c, const etcdserverpb::AuthUserGetRequest* req,
                                               etcdserverpb::AuthUserGetResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  serve_auth_read(ctx, c, reactor, [ctx, req, resp](const member::Caller& caller) {
    // etcd: root, or the user asking about itself.
    if (Error e = member::check_admin(*ctx, caller); e && caller.user != req->name()) return e;
    Error e = member::user_get(*ctx, *req, resp);
    if (!e) ctx->fill_header(resp->mutable_header());
    return e;
  });
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::UserList(grpc::CallbackServerContext* c, const etcdserverpb::AuthUserListRequest*,
                                                etcdserverpb::AuthUserListResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  serve_auth_read(ctx, c, reactor, [ctx, resp](const member::Caller& caller) {
    if (Error e = member::check_admin(*ctx, caller)) return e;
    member::user_list(*ctx, resp);
    ctx->fill_header(resp->mutable_header());
    return Error();
  });
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::UserDelete(grpc::CallbackServerContext* c,
                                                  const etcdserverpb::AuthUserDeleteRequest* req,
                                                  etcdserverpb::AuthUserDeleteResponse* resp) {
  return propose_request(ctx_, c, &Command::mutable_user_delete, *req, resp);
}

grpc::ServerUnaryReactor* AuthService::UserChangePassword(grpc::CallbackServerContext* c,
                                                          const etcdserverpb::AuthUserChangePasswordRequest* req,
                                                          etcdserverpb::AuthUserChangePasswordResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Command cmd;
  auto* ch = cmd.mutable_user_change_password();
  ch->set_name(req->name());
  if (!req->hashedpassword().empty()) {
    ch->set_hashedpassword(req->hashedpassword());
    propose_management(ctx_, c, reactor, std::move(cmd), resp);
    return reactor;
  }
  hash_then_propose(c, reactor, std::move(cmd), &req->password(),
                    [](Command& m) { return m.mutable_user_change_password()->mutable_hashedpassword(); }, resp);
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::UserGrantRole(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::AuthUserGrantRoleRequest* req,
                                                     etcdserverpb::AuthUserGrantRoleResponse* resp) {
  return propose_request(ctx_, c, &Command::mutable_user_grant_role, *req, resp);
}

grpc::ServerUnaryReactor* AuthService::UserRevokeRole(grpc::CallbackServerContext* c,
                                                      const etcdserverpb::AuthUserRevokeRoleRequest* req,
                                                      etcdserverpb::AuthUserRevokeRoleResponse* resp) {
  return propose_request(ctx_, c, &Command::mutable_user_revoke_role, *req, resp);
}

grpc::ServerUnaryReactor* AuthService::RoleAdd(grpc::CallbackServerContext* c, const etcdserverpb::AuthRoleAddRequest* req,
                                               etcdserverpb::AuthRoleAddResponse* resp) {
  return propose_request(ctx_, c, &Command::mutable_role_add, *req, resp);
}

grpc::ServerUnaryReactor* AuthService::RoleGet(grpc::CallbackServerContext* c, const etcdserverpb::AuthRoleGetRequest* req,
                                               etcdserverpb::AuthRoleGetResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  serve_auth_read(ctx, c, reactor, [ctx, req, resp](const member::Caller& caller) {
    // etcd: root, or a user that has the role.
    if (Error e = member::check_admin(*ctx, caller)) {
      if (!member::has_role(*ctx, caller.user, req->role())) return e;
    }
    Error e = member::role_get(*ctx, *req, resp);
    if (!e) ctx->fill_header(resp->mutable_header());
    return e;
  });
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::RoleList(grpc::CallbackServerContext* c, const etcdserverpb::AuthRoleListRequest*,
                                                etcdserverpb::AuthRoleListResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  serve_auth_read(ctx, c, reactor, [ctx, resp](const member::Caller& caller) {
    if (Error e = member::check_admin(*ctx, caller)) return e;
    member::role_list(*ctx, resp);
    ctx->fill_header(resp->mutable_header());
    return Error();
  });
  return reactor;
}

grpc::ServerUnaryReactor* AuthService::RoleDelete(grpc::CallbackServerContext* c,
                                                  const etcdserverpb::AuthRoleDeleteRequest* req,
                                                  etcdserverpb::AuthRoleDeleteResponse* resp) {
  return propose_request(ctx_, c, &Command::mutable_role_delete, *req, resp);
}

grpc::ServerUnaryReactor* AuthService::RoleGrantPermission(grpc::CallbackServerContext* c,
                                                           const etcdserverpb::AuthRoleGrantPermissionRequest* req,
                                                           etcdserverpb::AuthRoleGrantPermissionResponse* resp) {
  return propose_request(ctx_, c, &Command::mutable_role_grant_permission, *req, resp);
}

grpc::ServerUnaryReactor* AuthService::RoleRevokePermission(grpc::CallbackServerContext* c,
                                                            const etcdserverpb::AuthRoleRevokePermissionRequest* req,
                                                            etcdserverpb::AuthRoleRevokePermissionResponse* resp) {
  return propose_request(ctx_, c, &Command::mutable_role_revoke_permission, *req, resp);
}

}  // namespace etcdq::server
