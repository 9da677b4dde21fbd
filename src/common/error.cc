#include "common/error.h"

namespace etcdq::errors {

Error empty_key() { return {Code::kInvalidArgument, "etcdserver: key is not provided"}; }
Error key_not_found() { return {Code::kInvalidArgument, "etcdserver: key not found"}; }
Error value_provided() { return {Code::kInvalidArgument, "etcdserver: value is provided"}; }
Error lease_provided() { return {Code::kInvalidArgument, "etcdserver: lease is provided"}; }
Error too_many_ops() {
  return {Code::kInvalidArgument, "etcdserver: too many operations in txn request"};
}
Error duplicate_key() {
  return {Code::kInvalidArgument, "etcdserver: duplicate key given in txn request"};
}
Error request_too_large() { return {Code::kInvalidArgument, "etcdserver: request is too large"}; }
Error compacted() {
  return {Code::kOutOfRange, "etcdserver: mvcc: required revision has been compacted"};
}
Error future_rev() {
  return {Code::kOutOfRange, "etcdserver: mvcc: required revision is a future revision"};
}
Error no_space() {
  return {Code::kResourceExhausted, "etcdserver: mvcc: database space exceeded"};
}
Error lease_not_found() { return {Code::kNotFound, "etcdserver: requested lease not found"}; }
Error lease_exist() { return {Code::kFailedPrecondition, "etcdserver: lease already exists"}; }
Error lease_ttl_too_large() { return {Code::kOutOfRange, "etcdserver: too large lease TTL"}; }
Error corrupt() { return {Code::kDataLoss, "etcdserver: corrupt cluster"}; }
Error stopped() { return {Code::kUnavailable, "etcdserver: server stopped"}; }
Error no_leader() { return {Code::kUnavailable, "etcdserver: no leader"}; }
Error not_leader() { return {Code::kFailedPrecondition, "etcdserver: not leader"}; }
Error timeout() { return {Code::kUnavailable, "etcdserver: request timed out"}; }
Error leader_changed() {
  return {Code::kUnavailable, "etcdserver: leader changed"};
}
Error not_capable() { return {Code::kUnavailable, "etcdserver: not capable"}; }
Error member_exist() { return {Code::kFailedPrecondition, "etcdserver: member ID already exist"}; }
Error peer_url_exist() { return {Code::kFailedPrecondition, "etcdserver: Peer URLs already exists"}; }
Error member_not_found() { return {Code::kNotFound, "etcdserver: member not found"}; }
Error member_bad_urls() { return {Code::kInvalidArgument, "etcdserver: given member URLs are invalid"}; }
Error not_enough_started() {
  return {Code::kFailedPrecondition, "etcdserver: re-configuration failed due to not enough started members"};
}
Error member_not_learner() { return {Code::kFailedPrecondition, "etcdserver: can only promote a learner member"}; }
Error learner_not_ready() {
  return {Code::kFailedPrecondition, "etcdserver: can only promote a learner member which is in sync with leader"};
}
Error too_many_learners() { return {Code::kFailedPrecondition, "etcdserver: too many learner members in cluster"}; }
Error unhealthy() { return {Code::kUnavailable, "etcdserver: unhealthy cluster"}; }
Error bad_leader_transferee() { return {Code::kFailedPrecondition, "etcdserver: bad leader transferee"}; }
// FailedPrecondition since etcd 3.6 (3.5: Unavailable, which clientv3 retries:
// a watch on a learner then never ends).
Error not_supported_for_learner() {
  return {Code::kFailedPrecondition, "etcdserver: rpc not supported for learner"};
}
Error root_user_not_exist() { return {Code::kFailedPrecondition, "etcdserver: root user does not exist"}; }
Error root_role_not_exist() { return {Code::kFailedPrecondition, "etcdserver: root user does not have root role"}; }
Error user_already_exist() { return {Code::kFailedPrecondition, "etcdserver: user name already exists"}; }
Error user_empty() { return {Code::kInvalidArgument, "etcdserver: user name is empty"}; }
Error user_not_found() { return {Code::kFailedPrecondition, "etcdserver: user name not found"}; }
Error role_already_exist() { return {Code::kFailedPrecondition, "etcdserver: role name already exists"}; }
Error role_not_found() { return {Code::kFailedPrecondition, "etcdserver: role name not found"}; }
Error role_empty() { return {Code::kInvalidArgument, "etcdserver: role name is empty"}; }
Error auth_failed() {
  return {Code::kInvalidArgument, "etcdserver: authentication failed, invalid user ID or password"};
}
Error permission_not_given() { return {Code::kInvalidArgument, "etcdserver: permission not given"}; }
Error permission_denied() { return {Code::kPermissionDenied, "etcdserver: permission denied"}; }
Error role_not_granted() { return {Code::kFailedPrecondition, "etcdserver: role is not granted to the user"}; }
Error permission_not_granted() {
  return {Code::kFailedPrecondition, "etcdserver: permission is not granted to the role"};
}
Error auth_not_enabled() { return {Code::kFailedPrecondition, "etcdserver: authentication is not enabled"}; }
Error invalid_auth_token() { return {Code::kUnauthenticated, "etcdserver: invalid auth token"}; }
Error too_many_requests() { return {Code::kResourceExhausted, "etcdserver: too many requests"}; }
Error jwt_verify_only() { return {Code::kUnknown, "auth: token signing attempted with verify-only key"}; }
Error invalid_auth_mgmt() { return {Code::kInvalidArgument, "etcdserver: invalid auth management"}; }
Error auth_old_revision() { return {Code::kInvalidArgument, "etcdserver: revision of auth store is old"}; }
Error wrong_downgrade_version_format() {
  return {Code::kInvalidArgument, "etcdserver: wrong downgrade target version format"};
}
Error invalid_downgrade_target_version() {
  return {Code::kInvalidArgument, "etcdserver: invalid downgrade target version"};
}
Error no_inflight_downgrade() { return {Code::kFailedPrecondition, "etcdserver: no inflight downgrade job"}; }
Error downgrade_not_supported(const std::string& target) {
  return {Code::kFailedPrecondition,
          "etcdserver: downgrade is not supported by etcdq: its storage cannot be converted to etcd " + target +
              "'s; to move to etcd " + target +
              ", restore a snapshot (etcdctl snapshot save) with that etcd's snapshot restore"};
}
Error internal(std::string what) { return {Code::kInternal, std::move(what)}; }

}  // namespace etcdq::errors
