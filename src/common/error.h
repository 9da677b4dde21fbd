// The one error type of the server: an etcd error code plus etcd's exact
// message. Clients match on these strings, so every message lives here and
// nowhere else. Converted to grpc::Status only at the RPC boundary
// (server/status.h). Source of the strings: etcd's
// api/v3rpc/rpctypes/error.go and server/etcdserver/errors.go (v3.5).
#pragma once

#include <string>
#include <utility>

namespace etcdq {

// Same numbering as grpc::StatusCode so the conversion is a cast.
enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

class Error {
 public:
  Error() = default;  // OK
  Error(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return !ok(); }  // true when there is an error
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  bool operator==(const Error& o) const { return code_ == o.code_ && message_ == o.message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// etcd's errors, by the name etcd gives them (rpctypes.ErrGRPC*).
namespace errors {
Error empty_key();          // InvalidArgument "etcdserver: key is not provided"
Error key_not_found();      // InvalidArgument "etcdserver: key not found"
Error value_provided();     // InvalidArgument "etcdserver: value is provided"
Error lease_provided();     // InvalidArgument "etcdserver: lease is provided"
Error too_many_ops();       // InvalidArgument "etcdserver: too many operations in txn request"
Error duplicate_key();      // InvalidArgument "etcdserver: duplicate key given in txn request"
Error request_too_large();  // InvalidArgument "etcdserver: request is too large"
Error compacted();          // OutOfRange "etcdserver: mvcc: required revision has been compacted"
Error future_rev();         // OutOfRange "etcdserver: mvcc: required revision is a future revision"
Error no_space();           // ResourceExhausted "etcdserver: mvcc: database space exceeded"
Error lease_not_found();    // NotFound "etcdserver: requested lease not found"
Error lease_exist();        // FailedPrecondition "etcdserver: lease already exists"
Error lease_ttl_too_large();  // OutOfRange "etcdserver: too large lease TTL"
Error corrupt();            // DataLoss "etcdserver: corrupt cluster"
Error stopped();            // Unavailable "etcdserver: server stopped"
Error no_leader();          // Unavailable "etcdserver: no leader"
Error not_leader();         // FailedPrecondition "etcdserver: not leader"
Error timeout();            // Unavailable "etcdserver: request timed out"
Error leader_changed();     // Unavailable "etcdserver: leader changed"
Error not_capable();        // Unavailable "etcdserver: not capable"
// Membership (etcd's rpctypes ErrGRPCMember*, ErrGRPCLearner*).
Error member_exist();        // FailedPrecondition "etcdserver: member ID already exist"
Error peer_url_exist();      // FailedPrecondition "etcdserver: Peer URLs already exists"
Error member_not_found();    // NotFound "etcdserver: member not found"
Error member_bad_urls();     // InvalidArgument "etcdserver: given member URLs are invalid"
Error not_enough_started();  // FailedPrecondition "etcdserver: re-configuration failed due to not enough started members"
Error member_not_learner();  // FailedPrecondition "etcdserver: can only promote a learner member"
Error learner_not_ready();   // FailedPrecondition "etcdserver: can only promote a learner member which is in sync with leader"
Error too_many_learners();   // FailedPrecondition "etcdserver: too many learner members in cluster"
Error unhealthy();           // Unavailable "etcdserver: unhealthy cluster"
Error bad_leader_transferee();      // FailedPrecondition "etcdserver: bad leader transferee"
Error not_supported_for_learner();  // FailedPrecondition "etcdserver: rpc not supported for learner" (etcd 3.6)
// Authentication and authorization (etcd's rpctypes ErrGRPC*, auth/store.go).
Error root_user_not_exist();     // FailedPrecondition "etcdserver: root user does not exist"
Error root_role_not_exist();     // FailedPrecondition "etcdserver: root user does not have root role"
Error user_already_exist();      // FailedPrecondition "etcdserver: user name already exists"
Error user_empty();              // InvalidArgument "etcdserver: user name is empty"
Error user_not_found();          // FailedPrecondition "etcdserver: user name not found"
Error role_already_exist();      // FailedPrecondition "etcdserver: role name already exists"
Error role_not_found();          // FailedPrecondition "etcdserver: role name not found"
Error role_empty();              // InvalidArgument "etcdserver: role name is empty"
Error auth_failed();             // InvalidArgument "etcdserver: authentication failed, invalid user ID or password"
Error permission_not_given();    // InvalidArgument "etcdserver: permission not given"
Error permission_denied();       // PermissionDenied "etcdserver: permission denied"
Error role_not_granted();        // FailedPrecondition "etcdserver: role is not granted to the user"
Error permission_not_granted();  // FailedPrecondition "etcdserver: permission is not granted to the role"
Error auth_not_enabled();        // FailedPrecondition "etcdserver: authentication is not enabled"
Error invalid_auth_token();      // Unauthenticated "etcdserver: invalid auth token"
// Authenticate on a member whose --auth-token jwt has only pub-key (etcd's
// ErrVerifyOnly, not in v3rpc's error map: Unknown with its text).
Error jwt_verify_only();         // Unknown "auth: token signing attempted with verify-only key"
// etcd's ErrGRPCTooManyRequests; here: more password checks queued than
// the bcrypt executor takes (server/auth_service.h).
Error too_many_requests();       // ResourceExhausted "etcdserver: too many requests"
Error invalid_auth_mgmt();       // InvalidArgument "etcdserver: invalid auth management"
Error auth_old_revision();       // InvalidArgument "etcdserver: revision of auth store is old"
// Downgrade (etcd 3.6's rpctypes ErrGRPC*Downgrade*).
Error wrong_downgrade_version_format();    // InvalidArgument "etcdserver: wrong downgrade target version format"
Error invalid_downgrade_target_version();  // InvalidArgument "etcdserver: invalid downgrade target version"
Error no_inflight_downgrade();             // FailedPrecondition "etcdserver: no inflight downgrade job"
// etcdq's own: a downgrade it validated but cannot carry out
// (server/downgrade.h says why).
Error downgrade_not_supported(const std::string& target);  // FailedPrecondition
Error internal(std::string what);  // Internal, for bugs and storage failures
}  // namespace errors

}  // namespace etcdq
