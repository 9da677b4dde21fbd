// Maintenance.Downgrade's answers (server/downgrade.h), against what etcd
// 3.6.17 answered for the same requests (etcdctl downgrade validate/enable/
// cancel; tests/integration/test_etcd36_tools.py compares the two servers).
#include "server/downgrade.h"

#include <gtest/gtest.h>

namespace etcdq::server {
namespace {

etcdserverpb::DowngradeRequest request(etcdserverpb::DowngradeRequest::DowngradeAction action, std::string v) {
  etcdserverpb::DowngradeRequest r;
  r.set_action(action);
  r.set_version(std::move(v));
  return r;
}

Error answer(std::string_view api, etcdserverpb::DowngradeRequest::DowngradeAction action, std::string v,
             std::string* version = nullptr) {
  etcdserverpb::DowngradeResponse resp;
  Error e = answer_downgrade(api, request(action, std::move(v)), &resp);
  if (version) *version = resp.version();
  return e;
}

TEST(Downgrade, TargetParsesAsGoSemverWithMajorMinorAllowed) {
  SemVer v;
  EXPECT_FALSE(parse_downgrade_target("3.5", &v));
  EXPECT_EQ(v.major, 3);
  EXPECT_EQ(v.minor, 5);
  EXPECT_FALSE(parse_downgrade_target("3.5.7", &v));
  EXPECT_EQ(v.patch, 0);  // the cluster version keeps major.minor only
  EXPECT_FALSE(parse_downgrade_target("3.5.0-rc.1+build", &v));
  for (const char* bad : {"", "foo", "v3.5", "3", "3.5.0.1", "3.x", "3..5"}) {
    EXPECT_EQ(parse_downgrade_target(bad, &v), errors::wrong_downgrade_version_format()) << bad;
  }
}

TEST(Downgrade, ValidateAcceptsOnlyTheMinorBelowTheClusterVersion) {
  std::string version;
  // As etcd 3.6.17 (cluster version 3.6): 3.5 and 3.5.0 pass, others do not.
  EXPECT_FALSE(answer("3.6.17", etcdserverpb::DowngradeRequest::VALIDATE, "3.5", &version));
  EXPECT_EQ(version, "3.6");
  EXPECT_FALSE(answer("3.6.17", etcdserverpb::DowngradeRequest::VALIDATE, "3.5.0"));
  for (const char* bad : {"3.4", "3.6", "3.7", "2.5", "4.5"}) {
    EXPECT_EQ(answer("3.6.17", etcdserverpb::DowngradeRequest::VALIDATE, bad),
              errors::invalid_downgrade_target_version())
        << bad;
  }
  EXPECT_EQ(answer("3.6.17", etcdserverpb::DowngradeRequest::VALIDATE, "v3.5"),
            errors::wrong_downgrade_version_format());
  // A member speaking 3.5.0 is a 3.5 cluster: 3.4 is the one target.
  EXPECT_FALSE(answer("3.5.0", etcdserverpb::DowngradeRequest::VALIDATE, "3.4", &version));
  EXPECT_EQ(version, "3.5");
  EXPECT_EQ(answer("3.5.0", etcdserverpb::DowngradeRequest::VALIDATE, "3.5"),
            errors::invalid_downgrade_target_version());
}

TEST(Downgrade, EnableChecksAsValidateThenRefusesAValidTarget) {
  EXPECT_EQ(answer("3.6.17", etcdserverpb::DowngradeRequest::ENABLE, "3.6"),
            errors::invalid_downgrade_target_version());
  EXPECT_EQ(answer("3.6.17", etcdserverpb::DowngradeRequest::ENABLE, "foo"),
            errors::wrong_downgrade_version_format());
  Error e = answer("3.6.17", etcdserverpb::DowngradeRequest::ENABLE, "3.5");
  EXPECT_EQ(e, errors::downgrade_not_supported("3.5"));
  EXPECT_EQ(e.code(), Code::kFailedPrecondition);
}

TEST(Downgrade, CancelSucceedsWithTheClusterVersionAsWithNoJobInFlight) {
  std::string version;
  EXPECT_FALSE(answer("3.6.17", etcdserverpb::DowngradeRequest::CANCEL, "", &version));
  EXPECT_EQ(version, "3.6");
  EXPECT_FALSE(answer("3.5.0", etcdserverpb::DowngradeRequest::CANCEL, "3.4", &version));
  EXPECT_EQ(version, "3.5");
}

TEST(Downgrade, StorageVersionIsEmptyBelow36AndMajorMinorZeroFrom36) {
  EXPECT_EQ(storage_version("3.5.0"), "");
  EXPECT_EQ(storage_version("3.6.17"), "3.6.0");
  EXPECT_EQ(storage_version("3.7.1"), "3.7.0");
  EXPECT_EQ(cluster_version("3.5.0"), "3.5");
}

}  // namespace
}  // namespace etcdq::server
