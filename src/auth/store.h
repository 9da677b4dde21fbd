// The auth store, as etcd's (server/auth/store.go): users (name, bcrypt
// hash, roles, the no_password option), roles (key permissions), whether
// auth is enabled, and the auth revision, which rises by one with every
// change of users, roles or permissions (not with enable/disable: etcd's
// commitRevision is called by the user and role operations only).
//
// Replicated: every change comes from a committed log entry, applied on
// the apply thread through the entry's mvcc::Writer, so it lands in the
// same RocksDB batch as the rest of the entry (records "auth/..." in the
// meta column family; a Raft snapshot, which copies the whole database,
// carries them). An in-memory mirror serves the checks on any thread.
//
// Errors are etcd's (common/error.h), with the conditions of etcd's
// authStore methods of the same names.
//
// Thread-safety: mutations on the apply thread; reads and checks from any
// thread (a shared mutex guards the mirror; checks hold it shortly).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "auth/range_perms.h"
#include "common/error.h"
#include "etcd/api/authpb/auth.pb.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "mvcc/writer.h"
#include "storage/engine.h"

namespace etcdq::auth {

inline constexpr std::string_view kRootUser = "root";
inline constexpr std::string_view kRootRole = "root";
// The longest user or role name: a name is a key of etcd's authUsers or
// authRoles bucket in a snapshot's bbolt file, and bbolt refuses keys
// longer than its MaxKeySize (bbolt/format.h kMaxKeySize). etcd itself has
// no limit (its apply fails on such a key); etcdq refuses the UserAdd or
// RoleAdd with name_too_long() before it is proposed.
inline constexpr size_t kMaxNameBytes = 32768;
Error name_too_long(std::string_view what);  // InvalidArgument "etcdserver: <what> name is too long (...)"

// One entry of etcd's auth buckets ("auth", "authUsers", "authRoles", as
// a snapshot's bbolt file holds them: server/auth/store.go) as this
// store's record in the meta column family: *key and *value, or an empty
// *key for an entry etcdq does not keep. Users and roles are validated
// (a record etcd could not have written is refused with a reason);
// authRevision is etcd's 8-byte big-endian number. For `etcdq snapshot
// restore` (etcd_snapshot/restore.h), which writes the records before the
// store is opened on them.
Error etcd_bucket_record(std::string_view bucket, std::string_view etcd_key, std::string_view etcd_value,
                         std::string* key, std::string* value);

class Store {
 public:
  explicit Store(storage::Engine* engine);  // loads the stored state
  // Reloads everything (a snapshot restore replaced the database).
  void reload();

  // --- reads, any thread ---
  bool enabled() const;
  uint64_t revision() const;
  // The user's record, if it exists.
  bool user(std::string_view name, authpb::User* out) const;
  Error user_get(const etcdserverpb::AuthUserGetRequest& r, etcdserverpb::AuthUserGetResponse* resp) const;
  void user_list(etcdserverpb::AuthUserListResponse* resp) const;
  Error role_get(const etcdserverpb::AuthRoleGetRequest& r, etcdserverpb::AuthRoleGetResponse* resp) const;
  void role_list(etcdserverpb::AuthRoleListResponse* resp) const;

  // etcd's isOpPermitted: OK while auth is disabled; user_empty() when no
  // user is given (revision 0); auth_old_revision() when `revision` is
  // below the store's; permission_denied() when the user is gone or lacks
  // `a` over [key, range_end) (range_perms.h's convention). Root-role
  // users may do anything.
  // In a key-space plug-in's keys (keyspace/kind.h, touches) the user also
  // needs `a` over the plain keys the request reaches there (a queue's
  // produce, ack and consumer watch: queue/key_space.h).
  Error check_op(std::string_view user, uint64_t revision, std::string_view key, std::string_view range_end,
                 Access a) const;
  // etcd's IsAdminPermitted: OK while disabled; user_empty() with no user;
  // user_not_found(); permission_denied() without the root role.
  Error check_admin(std::string_view user) const;
  // etcd's CheckPassword: the revision the password was checked at.
  // auth_not_enabled(); auth_failed() for an unknown user, a no-password
  // user or a wrong password. Runs bcrypt: slow, call off hot threads.
  Error check_password(std::string_view user, std::string_view password, uint64_t* revision) const;

  // --- mutations, the apply thread; each writes through `w` ---
  Error auth_enable(mvcc::Writer& w);
  Error auth_disable(mvcc::Writer& w);
  // `r.hashedpassword` is the bcrypt hash (the proposer hashed; etcd's
  // UserAdd with HashedPassword); `r.password` is ignored.
  Error user_add(mvcc::Writer& w, const etcdserverpb::AuthUserAddRequest& r);
  Error user_delete(mvcc::Writer& w, const etcdserverpb::AuthUserDeleteRequest& r);
  Error user_change_password(mvcc::Writer& w, const etcdserverpb::AuthUserChangePasswordRequest& r);
  Error user_grant_role(mvcc::Writer& w, const etcdserverpb::AuthUserGrantRoleRequest& r);
  Error user_revoke_role(mvcc::Writer& w, const etcdserverpb::AuthUserRevokeRoleRequest& r);
  Error role_add(mvcc::Writer& w, const etcdserverpb::AuthRoleAddRequest& r);
  Error role_delete(mvcc::Writer& w, const etcdserverpb::AuthRoleDeleteRequest& r);
  Error role_grant_permission(mvcc::Writer& w, const etcdserverpb::AuthRoleGrantPermissionRequest& r);
  Error role_revoke_permission(mvcc::Writer& w, const etcdserverpb::AuthRoleRevokePermissionRequest& r);

 private:
  void put_user(mvcc::Writer& w, const authpb::User& u);
  void put_role(mvcc::Writer& w, const authpb::Role& r);
  // etcd's commitRevision, then the permission cache's refresh.
  void commit_revision(mvcc::Writer& w);
  void refresh_perms();  // mu_ held exclusively
  static bool has_root_role(const authpb::User& u);

  storage::Engine* engine_;
  mutable std::shared_mutex mu_;
  bool enabled_ = false;
  uint64_t revision_ = 0;
  std::map<std::string, authpb::User, std::less<>> users_;
  std::map<std::string, authpb::Role, std::less<>> roles_;
  std::map<std::string, std::shared_ptr<const RangePerms>, std::less<>> perms_;  // by user
};

}  // namespace etcdq::auth
