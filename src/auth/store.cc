#include "auth/store.h"

#include <algorithm>
#include <mutex>

#include "auth/bcrypt.h"
#include "keyspace/registry.h"

namespace etcdq::auth {

Error name_too_long(std::string_view what) {
  return Error(Code::kInvalidArgument, "etcdserver: " + std::string(what) + " name is too long (at most " +
                                           std::to_string(kMaxNameBytes) + " bytes)");
}

namespace {

constexpr std::string_view kEnabledKey = "auth/enabled";
constexpr std::string_view kRevisionKey = "auth/revision";
constexpr std::string_view kUserPrefix = "auth/user/";
constexpr std::string_view kRolePrefix = "auth/role/";

std::string encode_u64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i) {
    s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return s;
}

uint64_t decode_u64(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < s.size() && i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(s[i]);
  return v;
}

template <typename Fn>
void each_record(storage::Engine* engine, std::string_view prefix, Fn fn) {
  storage::Iterator it = engine->iterator(storage::Cf::kMeta);
  std::string p(prefix);
  for (it.seek(p); it.valid() && it.key().starts_with(p); it.next()) fn(it.value());
}

}  // namespace

Error etcd_bucket_record(std::string_view bucket, std::string_view etcd_key, std::string_view etcd_value,
                         std::string* key, std::string* value) {
  key->clear();
  value->clear();
  auto bad = [&](const std::string& what) {
    return Error(Code::kInvalidArgument, "auth bucket " + std::string(bucket) + ": " + what);
  };
  if (bucket == "authUsers" || bucket == "authRoles") {
    bool users = bucket == "authUsers";
    std::string name;
    if (users) {
      authpb::User u;
      if (!u.ParseFromArray(etcd_value.data(), static_cast<int>(etcd_value.size()))) return bad("not an authpb.User");
      name = u.name();
    } else {
      authpb::Role r;
      if (!r.ParseFromArray(etcd_value.data(), static_cast<int>(etcd_value.size()))) return bad("not an authpb.Role");
      name = r.name();
    }
    // etcd keys each record by its name.
    if (name.empty() || name != etcd_key) return bad("a record named \"" + name + "\" under another key");
    *key = std::string(users ? kUserPrefix : kRolePrefix) + name;
    *value = std::string(etcd_value);
    return {};
  }
  if (bucket == "auth") {
    if (etcd_key == "authEnabled") {
      if (etcd_value.size() != 1) return bad("authEnabled is not one byte");
      *key = kEnabledKey;
      *value = etcd_value[0] == 1 ? "1" : "0";
    } else if (etcd_key == "authRevision") {
      if (etcd_value.size() != 8) return bad("authRevision is not 8 bytes");
      *key = kRevisionKey;
      *value = encode_u64(decode_u64(etcd_value));  // both big-endian
    }
    return {};
  }
  return bad("not an auth bucket");
}

Store::Store(storage::Engine* engine) : engine_(engine) { reload(); }

void Store::reload() {
  std::unique_lock lock(mu_);
  std::string v;
  enabled_ = engine_->get(storage::Cf::kMeta, kEnabledKey, &v) && v == "1";
  // etcd's NewAuthStore starts a store without a revision at 1.
  revision_ = engine_->get(storage::Cf::kMeta, kRevisionKey, &v) ? decode_u64(v) : 1;
  users_.clear();
  roles_.clear();
  each_record(engine_, kUserPrefix, [this](std::string_view bytes) {
    authpb::User u;
    if (u.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) users_[u.name()] = std::move(u);
  });
  each_record(engine_, kRolePrefix, [this](std::string_view bytes) {
    authpb::Role r;
    if (r.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) roles_[r.name()] = std::move(r);
  });
  refresh_perms();
}

bool Store::enabled() const {
  std::shared_lock lock(mu_);
  return enabled_;
}

uint64_t Store::revision() const {
  std::shared_lock lock(mu_);
  return revision_;
}

bool Store::user(std::string_view name, authpb::User* out) const {
  std::shared_lock lock(mu_);
  auto it = users_.find(name);
  if (it == users_.end()) return false;
  *out = it->second;
  return true;
}

Error Store::user_get(const etcdserverpb::AuthUserGetRequest& r, etcdserverpb::AuthUserGetResponse* resp) const {
  std::shared_lock lock(mu_);
  auto it = users_.find(r.name());
  if (it == users_.end()) return errors::user_not_found();
  for (const auto& role : it->second.roles()) resp->add_roles(role);
  return {};
}

void Store::user_list(etcdserverpb::AuthUserListResponse* resp) const {
  std::shared_lock lock(mu_);
  for (const auto& [name, u] : users_) resp->add_users(name);
}

Error Store::role_get(const etcdserverpb::AuthRoleGetRequest& r, etcdserverpb::AuthRoleGetResponse* resp) const {
  std::shared_lock lock(mu_);
  auto it = roles_.find(r.role());
  if (it == roles_.end()) return errors::role_not_found();
  for (const auto& p : it->second.keypermission()) *resp->add_perm() = p;
  return {};
}

void Store::role_list(etcdserverpb::AuthRoleListResponse* resp) const {
  std::shared_lock lock(mu_);
  for (const auto& [name, r] : roles_) resp->add_roles(name);
}

bool Store::has_root_role(const authpb::User& u) {
  return std::find(u.roles().begin(), u.roles().end(), kRootRole) != u.roles().end();
}

Error Store::check_op(std::string_view user, uint64_t revision, std::string_view key, std::string_view range_end,
                      Access a) const {
  std::shared_lock lock(mu_);
  if (!enabled_) return {};
  if (revision == 0 || user.empty()) return errors::user_empty();
  if (revision < revision_) return errors::auth_old_revision();
  auto u = users_.find(user);
  if (u == users_.end()) return errors::permission_denied();
  if (has_root_role(u->second)) return {};
  auto p = perms_.find(user);
  if (p == perms_.end() || !p->second->permits(key, range_end, a)) return errors::permission_denied();
  for (const auto& [k, e] : keyspace::touches(key, range_end, a == Access::kWrite)) {
    if (!p->second->permits(k, e, a)) return errors::permission_denied();
  }
  return {};
}

Error Store::check_admin(std::string_view user) const {
  std::shared_lock lock(mu_);
  if (!enabled_) return {};
  if (user.empty()) return errors::user_empty();
  auto u = users_.find(user);
  if (u == users_.end()) return errors::user_not_found();
  if (!has_root_role(u->second)) return errors::permission_denied();
  return {};
}

Error Store::check_password(std::string_view user, std::string_view password, uint64_t* revision) const {
  std::string hash;
  {
    std::shared_lock lock(mu_);
    if (!enabled_) return errors::auth_not_enabled();
    auto u = users_.find(user);
    if (u == users_.end()) return errors::auth_failed();
    if (u->second.options().no_password()) return errors::auth_failed();
    hash = u->second.password();
    *revision = revision_;
  }
  // bcrypt outside the lock: it takes tens of milliseconds.
  if (!bcrypt_matches(hash, password)) return errors::auth_failed();
  return {};
}

void Store::put_user(mvcc::Writer& w, const authpb::User& u) {
  w.put_meta(std::string(kUserPrefix) + u.name(), u.SerializeAsString());
  users_[u.name()] = u;
}

void Store::put_role(mvcc::Writer& w, const authpb::Role& r) {
  w.put_meta(std::string(kRolePrefix) + r.name(), r.SerializeAsString());
  roles_[r.name()] = r;
}

void Store::commit_revision(mvcc::Writer& w) {
  ++revision_;
  w.put_meta(kRevisionKey, encode_u64(revision_));
  refresh_perms();
}

void Store::refresh_perms() {
  perms_.clear();
  for (const auto& [name, u] : users_) {
    std::vector<const authpb::Role*> roles;
    for (const auto& rn : u.roles()) {
      auto r = roles_.find(rn);
      if (r != roles_.end()) roles.push_back(&r->second);
    }
    perms_[name] = std::make_shared<const RangePerms>(roles);
  }
}

Error Store::auth_enable(mvcc::Writer& w) {
  std::unique_lock lock(mu_);
  if (enabled_) return {};  // etcd ignores a second enable
  auto root = users_.find(kRootUser);
  if (root == users_.end()) return errors::root_user_not_exist();
  if (!has_root_role(root->second)) return errors::root_role_not_exist();
  enabled_ = true;
  w.put_meta(kEnabledKey, "1");
  return {};
}

Error Store::auth_disable(mvcc::Writer& w) {
  std::unique_lock lock(mu_);
  if (!enabled_) return {};
  enabled_ = false;
  w.put_meta(kEnabledKey, "0");
  commit_revision(w);
  return {};
}

Error Store::user_add(mvcc::Writer& w, const etcdserverpb::AuthUserAddRequest& r) {
  if (r.name().empty()) return errors::user_empty();
  std::unique_lock lock(mu_);
  if (users_.contains(r.name())) return errors::user_already_exist();
  authpb::User u;
  u.set_name(r.name());
  bool no_password = r.has_options() && r.options().no_password();
  u.mutable_options()->set_no_password(no_password);
  if (!no_password) u.set_password(r.hashedpassword());
  put_user(w, u);
  commit_revision(w);
  return {};
}

Error Store::user_delete(mvcc::Writer& w, const etcdserverpb::AuthUserDeleteRequest& r) {
  std::unique_lock lock(mu_);
  if (enabled_ && r.name() == kRootUser) return errors::invalid_auth_mgmt();
  auto it = users_.find(r.name());
  if (it == users_.end()) return errors::user_not_found();
  users_.erase(it);
  w.delete_meta(std::string(kUserPrefix) + r.name());
  commit_revision(w);
  return {};
}

Error Store::user_change_password(mvcc::Writer& w, const etcdserverpb::AuthUserChangePasswordRequest& r) {
  std::unique_lock lock(mu_);
  auto it = users_.find(r.name());
  if (it == users_.end()) return errors::user_not_found();
  authpb::User u = it->second;
  u.set_password(u.options().no_password() ? "" : r.hashedpassword());
  put_user(w, u);
  commit_revision(w);
  return {};
}

Error Store::user_grant_role(mvcc::Writer& w, const etcdserverpb::AuthUserGrantRoleRequest& r) {
  std::unique_lock lock(mu_);
  auto it = users_.find(r.user());
  if (it == users_.end()) return errors::user_not_found();
  // etcd lets anyone be granted "root" before the role exists.
  if (r.role() != kRootRole && !roles_.contains(r.role())) return errors::role_not_found();
  authpb::User u = it->second;
  std::vector<std::string> roles(u.roles().begin(), u.roles().end());
  if (std::find(roles.begin(), roles.end(), r.role()) != roles.end()) return {};  // etcd: ignored, no revision
  roles.push_back(r.role());
  std::sort(roles.begin(), roles.end());
  u.clear_roles();
  for (auto& role : roles) u.add_roles(std::move(role));
  put_user(w, u);
  commit_revision(w);
  return {};
}

Error Store::user_revoke_role(mvcc::Writer& w, const etcdserverpb::AuthUserRevokeRoleRequest& r) {
  std::unique_lock lock(mu_);
  if (enabled_ && r.name() == kRootUser && r.role() == kRootRole) return errors::invalid_auth_mgmt();
  auto it = users_.find(r.name());
  if (it == users_.end()) return errors::user_not_found();
  authpb::User u = it->second;
  u.clear_roles();
  for (const auto& role : it->second.roles()) {
    if (role != r.role()) u.add_roles(role);
  }
  if (u.roles_size() == it->second.roles_size()) return errors::role_not_granted();
  put_user(w, u);
  commit_revision(w);
  return {};
}

Error Store::role_add(mvcc::Writer& w, const etcdserverpb::AuthRoleAddRequest& r) {
  if (r.name().empty()) return errors::role_empty();
  std::unique_lock lock(mu_);
  if (roles_.contains(r.name())) return errors::role_already_exist();
  authpb::Role role;
  role.set_name(r.name());
  put_role(w, role);
  commit_revision(w);
  return {};
}

Error Store::role_delete(mvcc::Writer& w, const etcdserverpb::AuthRoleDeleteRequest& r) {
  std::unique_lock lock(mu_);
  if (enabled_ && r.role() == kRootRole) return errors::invalid_auth_mgmt();
  auto it = roles_.find(r.role());
  if (it == roles_.end()) return errors::role_not_found();
  roles_.erase(it);
  w.delete_meta(std::string(kRolePrefix) + r.role());
  // The role leaves every user that had it (etcd's RoleDelete).
  std::vector<authpb::User> changed;
  for (const auto& [name, u] : users_) {
    if (std::find(u.roles().begin(), u.roles().end(), r.role()) == u.roles().end()) continue;
    authpb::User nu = u;
    nu.clear_roles();
    for (const auto& role : u.roles()) {
      if (role != r.role()) nu.add_roles(role);
    }
    changed.push_back(std::move(nu));
  }
  for (const auto& u : changed) put_user(w, u);
  commit_revision(w);
  return {};
}

Error Store::role_grant_permission(mvcc::Writer& w, const etcdserverpb::AuthRoleGrantPermissionRequest& r) {
  if (!r.has_perm()) return errors::permission_not_given();
  if (!valid_permission_range(r.perm().key(), r.perm().range_end())) return errors::invalid_auth_mgmt();
  std::unique_lock lock(mu_);
  auto it = roles_.find(r.name());
  if (it == roles_.end()) return errors::role_not_found();
  authpb::Role role = it->second;
  bool updated = false;
  for (auto& p : *role.mutable_keypermission()) {
    if (p.key() == r.perm().key() && p.range_end() == r.perm().range_end()) {
      p.set_permtype(r.perm().permtype());
      updated = true;
      break;
    }
  }
  if (!updated) {
    *role.add_keypermission() = r.perm();
    // etcd keeps a role's permissions sorted by key.
    std::stable_sort(role.mutable_keypermission()->begin(), role.mutable_keypermission()->end(),
                     [](const authpb::Permission& a, const authpb::Permission& b) { return a.key() < b.key(); });
  }
  put_role(w, role);
  commit_revision(w);
  return {};
}

Error Store::role_revoke_permission(mvcc::Writer& w, const etcdserverpb::AuthRoleRevokePermissionRequest& r) {
  std::unique_lock lock(mu_);
  auto it = roles_.find(r.role());
  if (it == roles_.end()) return errors::role_not_found();
  authpb::Role role;
  role.set_name(it->second.name());
  for (const auto& p : it->second.keypermission()) {
    if (p.key() != r.key() || p.range_end() != r.range_end()) *role.add_keypermission() = p;
  }
  if (role.keypermission_size() == it->second.keypermission_size()) return errors::permission_not_granted();
  put_role(w, role);
  commit_revision(w);
  return {};
}

}  // namespace etcdq::auth
