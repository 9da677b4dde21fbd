// The auth rules (auth/): permission ranges merged as etcd's
// range_perm_cache merges them, the auth store's revision and error rules
// (etcd's authStore), bcrypt through libcrypt, simple tokens, and the apply
// chain's auth layer refusing a command admitted under an older auth
// revision (etcd's authApplierV3).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "apply/entry.h"
#include "apply/state_machine.h"
#include "auth/bcrypt.h"
#include "auth/range_perms.h"
#include "auth/request_checks.h"
#include "auth/simple_tokens.h"
#include "auth/store.h"
#include "etcdq/command.pb.h"
#include "keyspace/registry.h"

namespace etcdq {
namespace {

namespace fs = std::filesystem;
using apply::Command;
using auth::Access;

authpb::Permission perm(authpb::Permission::Type t, const std::string& key, const std::string& end = "") {
  authpb::Permission p;
  p.set_permtype(t);
  p.set_key(key);
  p.set_range_end(end);
  return p;
}

auth::RangePerms perms_of(std::initializer_list<authpb::Permission> ps) {
  static std::vector<authpb::Role> keep;  // the roles must outlive the call only
  authpb::Role r;
  for (const auto& p : ps) *r.add_keypermission() = p;
  keep.push_back(r);
  return auth::RangePerms({&keep.back()});
}

const std::string kFromKey(1, '\0');

TEST(RangePerms, SingleKeyGrantCoversOnlyThatKey) {
  auto p = perms_of({perm(authpb::Permission::READ, "a")});
  EXPECT_TRUE(p.permits("a", "", Access::kRead));
  EXPECT_FALSE(p.permits("a", "", Access::kWrite));
  EXPECT_FALSE(p.permits("ab", "", Access::kRead));
  EXPECT_FALSE(p.permits("a", "b", Access::kRead));  // the range [a, b) holds more than a
  EXPECT_TRUE(p.permits("a", std::string("a\0", 2), Access::kRead));
}

TEST(RangePerms, PrefixGrantCoversKeysAndSubrangesUnderIt) {
  auto p = perms_of({perm(authpb::Permission::READWRITE, "p/", "p0")});
  EXPECT_TRUE(p.permits("p/x", "", Access::kRead));
  EXPECT_TRUE(p.permits("p/x", "", Access::kWrite));
  EXPECT_TRUE(p.permits("p/", "p0", Access::kRead));
  EXPECT_TRUE(p.permits("p/a", "p/b", Access::kWrite));
  EXPECT_FALSE(p.permits("p/", "p1", Access::kRead));
  EXPECT_FALSE(p.permits("p", "", Access::kRead));
  EXPECT_FALSE(p.permits("p/", kFromKey, Access::kRead));
}

TEST(RangePerms, FromKeyGrantCoversEverythingAboveItsKey) {
  auto p = perms_of({perm(authpb::Permission::WRITE, "m", kFromKey)});
  EXPECT_TRUE(p.permits("m", "", Access::kWrite));
  EXPECT_TRUE(p.permits("zzzz", "", Access::kWrite));
  EXPECT_TRUE(p.permits("n", kFromKey, Access::kWrite));
  EXPECT_FALSE(p.permits("l", kFromKey, Access::kWrite));
  EXPECT_FALSE(p.permits("n", "", Access::kRead));
}

TEST(RangePerms, AdjacentAndOverlappingGrantsMergeAcrossRolesAsEtcdsCache) {
  authpb::Role r1;
  *r1.add_keypermission() = perm(authpb::Permission::READ, "a", "c");
  authpb::Role r2;
  *r2.add_keypermission() = perm(authpb::Permission::READWRITE, "c", "e");
  *r2.add_keypermission() = perm(authpb::Permission::READ, "d", "g");
  auth::RangePerms p({&r1, &r2});
  EXPECT_TRUE(p.permits("a", "g", Access::kRead));   // [a,c) + [c,e) + [d,g)
  EXPECT_FALSE(p.permits("a", "h", Access::kRead));
  EXPECT_TRUE(p.permits("c", "e", Access::kWrite));
  EXPECT_FALSE(p.permits("b", "e", Access::kWrite));  // [b,c) is READ only
}

TEST(RangePerms, GapBetweenGrantsIsNotCovered) {
  auto p = perms_of({perm(authpb::Permission::READ, "a", "b"), perm(authpb::Permission::READ, "c", "d")});
  EXPECT_FALSE(p.permits("a", "d", Access::kRead));
  EXPECT_TRUE(p.permits("c", "", Access::kRead));
  EXPECT_FALSE(p.permits("b", "", Access::kRead));
}

TEST(RangePerms, ValidPermissionRangeAsEtcd) {
  EXPECT_TRUE(auth::valid_permission_range("a", ""));
  EXPECT_TRUE(auth::valid_permission_range("a", kFromKey));
  EXPECT_TRUE(auth::valid_permission_range("a", "b"));
  EXPECT_FALSE(auth::valid_permission_range("b", "a"));
  EXPECT_FALSE(auth::valid_permission_range("a", "a"));
}

TEST(Bcrypt, HashRoundTripsAndRejectsOtherPasswords) {
  std::string h;
  ASSERT_FALSE(auth::bcrypt_hash("s3cret", auth::kMinBcryptCost, &h));
  EXPECT_TRUE(h.starts_with("$2b$04$")) << h;
  EXPECT_EQ(h.find("s3cret"), std::string::npos);
  EXPECT_TRUE(auth::bcrypt_matches(h, "s3cret"));
  EXPECT_FALSE(auth::bcrypt_matches(h, "s3cre"));
  EXPECT_FALSE(auth::bcrypt_matches(h, ""));
  EXPECT_FALSE(auth::bcrypt_matches("plain", "plain"));
  std::string h2;
  ASSERT_FALSE(auth::bcrypt_hash("s3cret", auth::kMinBcryptCost, &h2));
  EXPECT_NE(h, h2) << "each hash has its own salt";
}

TEST(Bcrypt, VerifiesGoStyle2aHashes) {
  // Go's bcrypt writes $2a$; libxcrypt checks it the same way.
  std::string h;
  ASSERT_FALSE(auth::bcrypt_hash("pw", auth::kMinBcryptCost, &h));
  std::string a = h;
  a[2] = 'a';
  EXPECT_TRUE(auth::bcrypt_matches(a, "pw"));
}

TEST(Bcrypt, APasswordWithANulIsNeverHashedNorMatched) {
  // crypt(3) would stop at the NUL: "\0secret" would be the empty password.
  std::string h;
  Error e = auth::bcrypt_hash(std::string("\0secret", 7), auth::kMinBcryptCost, &h);
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  ASSERT_FALSE(auth::bcrypt_hash("abc", auth::kMinBcryptCost, &h));
  EXPECT_TRUE(auth::bcrypt_matches(h, "abc"));
  EXPECT_FALSE(auth::bcrypt_matches(h, std::string("abc\0wrong", 9)));
  ASSERT_FALSE(auth::bcrypt_hash("", auth::kMinBcryptCost, &h));
  EXPECT_FALSE(auth::bcrypt_matches(h, std::string("\0secret", 7)));
}

TEST(SimpleTokens, TokenIsSixteenLettersDotIndexAndExpiresAfterTtl) {
  auth::SimpleTokens t(std::chrono::seconds(1));
  std::string tok = t.assign("u", "h", 42);
  ASSERT_EQ(tok.size(), 16u + 3u);
  EXPECT_EQ(tok.substr(16), ".42");
  for (char ch : tok.substr(0, 16)) EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(ch)));
  std::string user, hash;
  EXPECT_TRUE(t.lookup(tok, &user, &hash));
  EXPECT_EQ(user, "u");
  EXPECT_FALSE(t.lookup("nope.1", &user, &hash));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE(t.lookup(tok, &user, &hash));
  std::string tok2 = t.assign("u", "h", 43);
  t.disable_all();
  EXPECT_FALSE(t.lookup(tok2, &user, &hash));
}

class AuthStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etcdq-auth-" + std::to_string(std::random_device{}()));
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &sm_));
    index_ = sm_->applier()->applied_index();
  }
  void TearDown() override {
    sm_.reset();
    fs::remove_all(dir_);
  }
  Error apply(Command c, const std::string& user = "", uint64_t rev = 0) {
    if (!user.empty()) {
      c.set_auth_user(user);
      c.set_auth_revision(rev == 0 ? store()->revision() : rev);
    }
    std::string entry;
    apply::append_framed(&entry, c.SerializeAsString());
    apply::pad_entry(&entry);
    std::vector<apply::Result> results;
    EXPECT_FALSE(sm_->applier()->apply(++index_, entry, &results));
    return results.at(0).error;
  }
  auth::Store* store() { return sm_->auth(); }
  void reopen() {
    sm_.reset();
    ASSERT_FALSE(apply::StateMachine::open(dir_.string(), {}, &sm_));
  }
  static Command user_add(const std::string& name) {
    Command c;
    c.mutable_user_add()->set_name(name);
    std::string h;
    EXPECT_FALSE(auth::bcrypt_hash("pw", auth::kMinBcryptCost, &h));
    c.mutable_user_add()->set_hashedpassword(h);
    return c;
  }
  static Command role_add(const std::string& name) {
    Command c;
    c.mutable_role_add()->set_name(name);
    return c;
  }
  static Command grant_role(const std::string& user, const std::string& role) {
    Command c;
    c.mutable_user_grant_role()->set_user(user);
    c.mutable_user_grant_role()->set_role(role);
    return c;
  }
  static Command grant_perm(const std::string& role, authpb::Permission p) {
    Command c;
    c.mutable_role_grant_permission()->set_name(role);
    *c.mutable_role_grant_permission()->mutable_perm() = p;
    return c;
  }
  static Command enable() {
    Command c;
    c.mutable_auth_enable();
    return c;
  }
  static Command put(const std::string& k) {
    Command c;
    c.mutable_put()->set_key(k);
    c.mutable_put()->set_value("v");
    return c;
  }
  void setup_root_and_user() {
    ASSERT_FALSE(apply(user_add("root")));
    ASSERT_FALSE(apply(grant_role("root", "root")));
    ASSERT_FALSE(apply(user_add("u")));
    ASSERT_FALSE(apply(role_add("r")));
    ASSERT_FALSE(apply(grant_perm("r", perm(authpb::Permission::READWRITE, "a", "b"))));
    ASSERT_FALSE(apply(grant_role("u", "r")));
    ASSERT_FALSE(apply(enable()));
  }

  fs::path dir_;
  std::unique_ptr<apply::StateMachine> sm_;
  uint64_t index_ = 0;
};

TEST_F(AuthStoreTest, QueueAliasNeedsThePermissionOnWhatItTouches) {
  // A read or delete under /queue/ touches /q/ (queue/keys.h): permission
  // on /queue/ alone is not enough.
  ASSERT_FALSE(apply(user_add("root")));
  ASSERT_FALSE(apply(grant_role("root", "root")));
  ASSERT_FALSE(apply(user_add("u")));
  ASSERT_FALSE(apply(role_add("r")));
  ASSERT_FALSE(apply(grant_perm("r", perm(authpb::Permission::READWRITE, "/queue/", "/queue0"))));
  ASSERT_FALSE(apply(grant_role("u", "r")));
  ASSERT_FALSE(apply(enable()));
  uint64_t rev = store()->revision();
  EXPECT_EQ(store()->check_op("u", rev, "/queue/jobs/", "/queue/jobs0", auth::Access::kRead),
            errors::permission_denied());
  EXPECT_EQ(store()->check_op("u", rev, "/queue/jobs/1/a", "", auth::Access::kWrite), errors::permission_denied());
  EXPECT_FALSE(store()->check_op("u", rev, "/queue/jobs/", "/queue0", auth::Access::kRead))
      << "a range that ends outside /queue/ is not rewritten";
  ASSERT_FALSE(apply(role_add("q"), "root"));
  ASSERT_FALSE(apply(grant_perm("q", perm(authpb::Permission::READWRITE, "/q/", "/q0")), "root"));
  ASSERT_FALSE(apply(grant_role("u", "q"), "root"));
  rev = store()->revision();
  EXPECT_FALSE(store()->check_op("u", rev, "/queue/jobs/", "/queue/jobs0", auth::Access::kRead));
}

TEST_F(AuthStoreTest, QueueVerbsNeedThePermissionOfTheKeysTheyTouch) {
  // A consumer Watch is delivered the queue's messages; a consumer-scoped
  // ack deletes one: permission on the consumer key alone is not enough.
  ASSERT_FALSE(apply(user_add("root")));
  ASSERT_FALSE(apply(grant_role("root", "root")));
  ASSERT_FALSE(apply(user_add("u")));
  ASSERT_FALSE(apply(role_add("c")));
  ASSERT_FALSE(apply(grant_perm("c", perm(authpb::Permission::READWRITE, "/q/jobs/c/", "/q/jobs/c0"))));
  ASSERT_FALSE(apply(grant_role("u", "c")));
  ASSERT_FALSE(apply(enable()));
  uint64_t rev = store()->revision();
  const std::string ack = "/q/jobs/c/me/00000000000000000001/t";
  EXPECT_EQ(store()->check_op("u", rev, "/q/jobs/c/me", "", auth::Access::kRead), errors::permission_denied());
  EXPECT_EQ(store()->check_op("u", rev, "/queue/jobs/c/me", "", auth::Access::kRead), errors::permission_denied());
  EXPECT_EQ(store()->check_op("u", rev, ack, "", auth::Access::kWrite), errors::permission_denied());
  // Reading and deleting the messages themselves: the consumer may now.
  ASSERT_FALSE(apply(role_add("m"), "root"));
  ASSERT_FALSE(apply(grant_perm("m", perm(authpb::Permission::READWRITE, "/q/jobs/0", "/q/jobs/:")), "root"));
  ASSERT_FALSE(apply(grant_role("u", "m"), "root"));
  rev = store()->revision();
  EXPECT_FALSE(store()->check_op("u", rev, "/q/jobs/c/me", "", auth::Access::kRead));
  EXPECT_FALSE(store()->check_op("u", rev, ack, "", auth::Access::kWrite));
  EXPECT_EQ(store()->check_op("u", rev, "/q/other/c/me", "", auth::Access::kRead), errors::permission_denied())
      << "another queue's messages";
  EXPECT_TRUE(keyspace::touches("/plain", "", /*write=*/false).empty());
  // A produce writes a message: WRITE on /q/{queue}/p/ alone is not enough.
  ASSERT_FALSE(apply(user_add("producer"), "root"));
  ASSERT_FALSE(apply(role_add("p"), "root"));
  ASSERT_FALSE(apply(grant_perm("p", perm(authpb::Permission::WRITE, "/q/jobs/p/", "/q/jobs/p0")), "root"));
  ASSERT_FALSE(apply(grant_role("producer", "p"), "root"));
  rev = store()->revision();
  EXPECT_EQ(store()->check_op("producer", rev, "/q/jobs/p/x", "", auth::Access::kWrite), errors::permission_denied());
  ASSERT_FALSE(apply(grant_role("producer", "m"), "root"));
  rev = store()->revision();
  EXPECT_FALSE(store()->check_op("producer", rev, "/q/jobs/p/x", "", auth::Access::kWrite));
}

TEST_F(AuthStoreTest, EnableNeedsRootUserWithRootRole) {
  EXPECT_EQ(apply(enable()), errors::root_user_not_exist());
  ASSERT_FALSE(apply(user_add("root")));
  EXPECT_EQ(apply(enable()), errors::root_role_not_exist());
  ASSERT_FALSE(apply(grant_role("root", "root")));  // "root" needs no role record
  EXPECT_FALSE(apply(enable()));
  EXPECT_TRUE(store()->enabled());
}

TEST_F(AuthStoreTest, RevisionStartsAtOneAndRisesWithEveryChangeButNotWithEnable) {
  EXPECT_EQ(store()->revision(), 1u);
  ASSERT_FALSE(apply(user_add("root")));
  EXPECT_EQ(store()->revision(), 2u);
  EXPECT_EQ(apply(user_add("root")), errors::user_already_exist());
  EXPECT_EQ(store()->revision(), 2u) << "a refused change leaves the revision";
  ASSERT_FALSE(apply(grant_role("root", "root")));
  EXPECT_EQ(store()->revision(), 3u);
  ASSERT_FALSE(apply(grant_role("root", "root")));  // already granted: ignored
  EXPECT_EQ(store()->revision(), 3u);
  ASSERT_FALSE(apply(enable()));
  EXPECT_EQ(store()->revision(), 3u);
  Command dis;
  dis.mutable_auth_disable();
  ASSERT_FALSE(apply(dis, "root"));
  EXPECT_EQ(store()->revision(), 4u);
}

TEST_F(AuthStoreTest, StatePersistsAcrossReopen) {
  setup_root_and_user();
  uint64_t rev = store()->revision();
  reopen();
  EXPECT_TRUE(store()->enabled());
  EXPECT_EQ(store()->revision(), rev);
  etcdserverpb::AuthUserListResponse users;
  store()->user_list(&users);
  ASSERT_EQ(users.users_size(), 2);
  EXPECT_EQ(users.users(0), "root");
  uint64_t at = 0;
  EXPECT_FALSE(store()->check_password("u", "pw", &at));
  EXPECT_EQ(store()->check_password("u", "bad", &at), errors::auth_failed());
  EXPECT_FALSE(store()->check_op("u", rev, "a", "", Access::kWrite));
}

TEST_F(AuthStoreTest, ApplyRefusesWritesWithoutPermissionOrWithAnOldRevision) {
  setup_root_and_user();
  EXPECT_FALSE(apply(put("a"), "u"));
  EXPECT_EQ(apply(put("z"), "u"), errors::permission_denied());
  EXPECT_EQ(apply(put("a")), errors::user_empty());
  uint64_t old = store()->revision();
  ASSERT_FALSE(apply(role_add("other"), "root"));
  // Admitted before the role was added: etcd's ErrAuthOldRevision.
  EXPECT_EQ(apply(put("a"), "u", old), errors::auth_old_revision());
  EXPECT_FALSE(apply(put("a"), "u"));
  // Auth management needs the root role.
  EXPECT_EQ(apply(role_add("x"), "u"), errors::permission_denied());
  // Internal commands (the leader's expiries) pass.
  Command internal = put("z");
  internal.set_internal(true);
  EXPECT_FALSE(apply(internal));
}

TEST_F(AuthStoreTest, RootCannotBeDeletedOrLoseRootWhileEnabled) {
  setup_root_and_user();
  Command del;
  del.mutable_user_delete()->set_name("root");
  EXPECT_EQ(apply(del, "root"), errors::invalid_auth_mgmt());
  Command revoke;
  revoke.mutable_user_revoke_role()->set_name("root");
  revoke.mutable_user_revoke_role()->set_role("root");
  EXPECT_EQ(apply(revoke, "root"), errors::invalid_auth_mgmt());
  Command rdel;
  rdel.mutable_role_delete()->set_role("root");
  EXPECT_EQ(apply(rdel, "root"), errors::invalid_auth_mgmt());
}

TEST_F(AuthStoreTest, RoleDeleteRemovesItFromUsersAndRevokeErrorsAsEtcd) {
  setup_root_and_user();
  Command rp;
  rp.mutable_role_revoke_permission()->set_role("r");
  rp.mutable_role_revoke_permission()->set_key("zz");
  EXPECT_EQ(apply(rp, "root"), errors::permission_not_granted());
  Command rr;
  rr.mutable_user_revoke_role()->set_name("u");
  rr.mutable_user_revoke_role()->set_role("zz");
  EXPECT_EQ(apply(rr, "root"), errors::role_not_granted());
  Command rdel;
  rdel.mutable_role_delete()->set_role("r");
  ASSERT_FALSE(apply(rdel, "root"));
  etcdserverpb::AuthUserGetRequest g;
  g.set_name("u");
  etcdserverpb::AuthUserGetResponse resp;
  ASSERT_FALSE(store()->user_get(g, &resp));
  EXPECT_EQ(resp.roles_size(), 0);
  EXPECT_EQ(apply(put("a"), "u"), errors::permission_denied());
}

TEST_F(AuthStoreTest, TxnNeedsEveryCompareAndOpIncludingNestedOnes) {
  setup_root_and_user();
  auth::Caller u{"u", store()->revision()};
  etcdserverpb::TxnRequest t;
  t.add_compare()->set_key("a");
  t.add_success()->mutable_request_put()->set_key("a");
  EXPECT_FALSE(auth::check_txn(*store(), u, t, nullptr));
  auto* nested = t.add_failure()->mutable_request_txn();
  nested->add_success()->mutable_request_range()->set_key("zz");
  EXPECT_EQ(auth::check_txn(*store(), u, t, nullptr), errors::permission_denied());
  etcdserverpb::TxnRequest t2;
  t2.add_compare()->set_key("q");
  EXPECT_EQ(auth::check_txn(*store(), u, t2, nullptr), errors::permission_denied());
}

TEST_F(AuthStoreTest, PutWithPrevKvNeedsReadAndLeaseRevokeNeedsWriteOnEveryKey) {
  setup_root_and_user();
  ASSERT_FALSE(apply(grant_perm("r", perm(authpb::Permission::WRITE, "w")), "root"));
  // The grant moved the revision: stamp anew.
  auth::Caller u{"u", store()->revision()};
  etcdserverpb::PutRequest p;
  p.set_key("w");
  EXPECT_FALSE(auth::check_put(*store(), u, p, nullptr));
  p.set_prev_kv(true);
  EXPECT_EQ(auth::check_put(*store(), u, p, nullptr), errors::permission_denied());
  auto keys = [](int64_t) { return std::vector<std::string>{"a", "zz"}; };
  EXPECT_EQ(auth::check_lease_revoke(*store(), u, 7, keys), errors::permission_denied());
  auto ok_keys = [](int64_t) { return std::vector<std::string>{"a", "w"}; };
  EXPECT_FALSE(auth::check_lease_revoke(*store(), u, 7, ok_keys));
}

}  // namespace
}  // namespace etcdq
