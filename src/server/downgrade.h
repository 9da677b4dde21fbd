// Maintenance.Downgrade and the versions Status reports beside it, as a
// one-version etcd 3.6 cluster answers them (etcd's
// server/etcdserver/v3_server.go Downgrade, version/version.go).
//
// etcd's cluster version is the major.minor of the version its members
// speak; a downgrade may only target the minor version just below it. etcdq
// speaks kEtcdApiVersion (maintenance_service.h), so its cluster version is
// that version's major.minor ("3.6" for "3.6.0"), and:
//
//  - VALIDATE answers exactly as etcd: "etcdserver: wrong downgrade target
//    version format" for a version that is neither major.minor.patch nor
//    major.minor, "etcdserver: invalid downgrade target version" for any
//    target but the minor below, else success with the cluster version.
//  - ENABLE checks as VALIDATE, then refuses a valid target with
//    errors::downgrade_not_supported (FailedPrecondition): etcd lowers the
//    cluster version and then rewrites its bbolt file in the older schema;
//    etcdq's storage is RocksDB, which no older etcd reads, so an enabled
//    downgrade could never finish. The way to an older etcd is a snapshot
//    (etcdq writes etcd's snapshot file; README, "Backup and migration").
//  - CANCEL succeeds with the cluster version, as etcd's does when no
//    downgrade is in progress (it only logs "no inflight downgrade job"),
//    since none ever is here.
//
// Status: downgradeInfo is always {enabled: false}; storageVersion is
// storage_version(kEtcdApiVersion). Pure functions: any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"

namespace etcdq::server {

struct SemVer {
  int64_t major = 0;
  int64_t minor = 0;
  int64_t patch = 0;
};

// go-semver's NewVersion: "M.m.p" with an optional "-prerelease" and
// "+metadata"; false for anything else (a leading "v" included).
bool parse_semver(std::string_view text, SemVer* out);

// etcd's convertToClusterVersion: "M.m.p" or "M.m", patch dropped.
// errors::wrong_downgrade_version_format otherwise.
Error parse_downgrade_target(std::string_view text, SemVer* out);

// "3.5" for "3.5.0": the cluster version a cluster of members that speak
// `api_version` has (etcd's version.Cluster).
std::string cluster_version(std::string_view api_version);

// The etcd storage version Status.storageVersion, /version's "storage" and
// the snapshot stream's version field report, as etcd 3.6 (major.minor.0 of
// the version spoken): empty below 3.6, where etcd has none of them. It says
// which etcd restores etcdq's snapshots (etcd 3.6 does); the file itself is
// in etcd 3.4's layout, which every etcd since reads, and carries no
// storageVersion key, so `etcdutl snapshot status` shows no VERSION for it.
std::string storage_version(std::string_view api_version);

// The answer to one Downgrade request from members speaking `api_version`:
// fills resp->version, or returns the error (see above).
Error answer_downgrade(std::string_view api_version, const etcdserverpb::DowngradeRequest& req,
                       etcdserverpb::DowngradeResponse* resp);

}  // namespace etcdq::server
