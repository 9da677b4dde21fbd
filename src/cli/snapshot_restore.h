// `etcdq snapshot restore FILE [flags]`: builds a member's data dir from an
// etcd snapshot file (etcd_snapshot/restore.h), with etcdctl's restore flags
// and defaults (etcd 3.4 etcdctl/ctlv3/command/snapshot_command.go):
//   --name                         default "default"
//   --data-dir                     default "<name>.etcdq" (etcdq's own default)
//   --initial-cluster              default "default=http://localhost:2380"
//   --initial-cluster-token        default "etcd-cluster"
//   --initial-advertise-peer-urls  default "http://localhost:2380"
//   --skip-hash-check              default false
// Flags take "--flag value" or "--flag=value". Member and cluster ids come
// from these flags as etcd computes them (member/identity.h), so the
// members then start with `etcdq --name N --data-dir D --initial-cluster C
// --initial-cluster-token T` (initial-cluster-state new) and form the cluster.
//
// Exit status: 0 restored; 1 refused or failed (message on stderr: corrupt,
// truncated, missing hash, data dir not empty, bad flags).
//
// Thread-safety: call from main() only.
#pragma once

namespace etcdq::cli {

// argv[0] is "snapshot". Returns the process exit status.
int snapshot_main(int argc, char** argv);

}  // namespace etcdq::cli
