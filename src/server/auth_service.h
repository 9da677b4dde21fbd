// etcd's Auth service (server/etcdserver/v3_server.go's Auth* and User*/
// Role* methods): management calls become commands through the proposal
// pipeline (member/pipeline.h) and are applied to the replicated auth store
// by the apply chain's auth layer, which also checks the root role there
// (etcd's needAdminPermission); reads (AuthStatus, UserGet, UserList,
// RoleGet, RoleList) are served from this member's auth store after the
// read barrier. Passwords are hashed here, before proposing, at
// --bcrypt-cost (member/auth.h); Authenticate checks one and issues a
// token of this member.
//
// bcrypt (tens of ms a call at cost 10) never runs on gRPC's threads: the
// password checks and hashes run on bcrypt_threads() threads of their own
// with at most kMaxQueuedBcrypt waiting; past that a call fails at once
// with errors::too_many_requests(), so an Authenticate flood costs other
// RPCs at most those threads, never gRPC's callback pool.
//
// Permission, as etcd: UserList, RoleList and every change need the root
// role; UserGet is allowed for the user itself, RoleGet for a role the
// user has; AuthStatus and Authenticate need nothing.
#pragma once

#include <functional>
#include <memory>

#include "common/executor.h"
#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "server/context.h"
#include "server/ruled_service.h"

namespace etcdq::server {

class AuthService final : public RuledService<etcdserverpb::Auth> {
 public:
  explicit AuthService(Context* ctx);

  grpc::ServerUnaryReactor* AuthEnable(grpc::CallbackServerContext* c, const etcdserverpb::AuthEnableRequest* req,
                                       etcdserverpb::AuthEnableResponse* resp) override;
  grpc::ServerUnaryReactor* AuthDisable(grpc::CallbackServerContext* c, const etcdserverpb::AuthDisableRequest* req,
                                        etcdserverpb::AuthDisableResponse* resp) override;
  grpc::ServerUnaryReactor* AuthStatus(grpc::CallbackServerContext* c, const etcdserverpb::AuthStatusRequest* req,
                                       etcdserverpb::AuthStatusResponse* resp) override;
  grpc::ServerUnaryReactor* Authenticate(grpc::CallbackServerContext* c, const etcdserverpb::AuthenticateRequest* req,
                                         etcdserverpb::AuthenticateResponse* resp) override;
  grpc::ServerUnaryReactor* UserAdd(grpc::CallbackServerContext* c, const etcdserverpb::AuthUserAddRequest* req,
                                    etcdserverpb::AuthUserAddResponse* resp) override;
  grpc::ServerUnaryReactor* UserGet(grpc::CallbackServerContext* c, const etcdserverpb::AuthUserGetRequest* req,
                                    etcdserverpb::AuthUserGetResponse* resp) override;
  grpc::ServerUnaryReactor* UserList(grpc::CallbackServerContext* c, const etcdserverpb::AuthUserListRequest* req,
                                     etcdserverpb::AuthUserListResponse* resp) override;
  grpc::ServerUnaryReactor* UserDelete(grpc::CallbackServerContext* c, const etcdserverpb::AuthUserDeleteRequest* req,
                                       etcdserverpb::AuthUserDeleteResponse* resp) override;
  grpc::ServerUnaryReactor* UserChangePassword(grpc::CallbackServerContext* c,
                                               const etcdserverpb::AuthUserChangePasswordRequest* req,
                                               etcdserverpb::AuthUserChangePasswordResponse* resp) override;
  grpc::ServerUnaryReactor* UserGrantRole(grpc::CallbackServerContext* c,
                                          const etcdserverpb::AuthUserGrantRoleRequest* req,
                                          etcdserverpb::AuthUserGrantRoleResponse* resp) override;
  grpc::ServerUnaryReactor* UserRevokeRole(grpc::CallbackServerContext* c,
                                           const etcdserverpb::AuthUserRevokeRoleRequest* req,
                                           etcdserverpb::AuthUserRevokeRoleResponse* resp) override;
  grpc::ServerUnaryReactor* RoleAdd(grpc::CallbackServerContext* c, const etcdserverpb::AuthRoleAddRequest* req,
                                    etcdserverpb::AuthRoleAddResponse* resp) override;
  grpc::ServerUnaryReactor* RoleGet(grpc::CallbackServerContext* c, const etcdserverpb::AuthRoleGetRequest* req,
                                    etcdserverpb::AuthRoleGetResponse* resp) override;
  grpc::ServerUnaryReactor* RoleList(grpc::CallbackServerContext* c, const etcdserverpb::AuthRoleListRequest* req,
                                     etcdserverpb::AuthRoleListResponse* resp) override;
  grpc::ServerUnaryReactor* RoleDelete(grpc::CallbackServerContext* c, const etcdserverpb::AuthRoleDeleteRequest* req,
                                       etcdserverpb::AuthRoleDeleteResponse* resp) override;
  grpc::ServerUnaryReactor* RoleGrantPermission(grpc::CallbackServerContext* c,
                                                const etcdserverpb::AuthRoleGrantPermissionRequest* req,
                                                etcdserverpb::AuthRoleGrantPermissionResponse* resp) override;
  grpc::ServerUnaryReactor* RoleRevokePermission(grpc::CallbackServerContext* c,
                                                 const etcdserverpb::AuthRoleRevokePermissionRequest* req,
                                                 etcdserverpb::AuthRoleRevokePermissionResponse* resp) override;

  // Half the cores, at least one: logins use at most that much CPU.
  static int bcrypt_threads();
  static constexpr size_t kMaxQueuedBcrypt = 64;

 private:
  // Runs `task` on the bcrypt executor, or finishes `reactor` with
  // errors::too_many_requests() when the queue is full.
  void run_bcrypt(grpc::ServerUnaryReactor* reactor, std::function<void()> task);
  // Hashes `password` on the bcrypt executor into the hashedPassword field
  // `hashed(cmd)` names, then proposes `cmd` (UserAdd, UserChangePassword).
  template <typename Resp>
  void hash_then_propose(grpc::CallbackServerContext* c, grpc::ServerUnaryReactor* reactor, apply::Command cmd,
                         const std::string* password, std::string* (*hashed)(apply::Command&), Resp* resp);

  Context* ctx_;
  // Last member: destroyed first, running what is queued (each task
  // finishes its call) before the context goes.
  std::unique_ptr<Executor> bcrypt_ = std::make_unique<Executor>(bcrypt_threads(), "bcrypt");
};

}  // namespace etcdq::server
