#include "member/maintenance.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <utility>

#include "common/progress.h"
#include "etcd_snapshot/writer.h"
#include "member/cluster.h"
#include "mvcc/etcd_keys.h"

namespace etcdq::member::maintenance {
namespace {

// The member's tables a snapshot holds beside the view
// (etcd_snapshot/writer.h), read now.
etcd_snapshot::Tables snapshot_tables(const Context& ctx) {
  etcd_snapshot::Tables t;
  t.alarms = ctx.alarms->list(0, etcdserverpb::NONE);
  google::protobuf::RepeatedPtrField<etcdserverpb::Member> members;
  list_members(ctx, &members);
  t.members.assign(members.begin(), members.end());
  return t;
}

}  // namespace

DbSize db_size(const Context& ctx) {
  DbSize s;
  s.bytes = ctx.store->engine()->size_bytes();
  s.in_use_bytes = ctx.store->engine()->in_use_bytes();
  return s;
}

std::vector<etcdserverpb::AlarmMember> alarms(const Context& ctx, uint64_t member_id, etcdserverpb::AlarmType type) {
  return ctx.alarms->list(member_id, type);
}

Error defragment(Context& ctx) { return ctx.store->engine()->compact_all(); }

Error hash_kv(const Context& ctx, int64_t revision, KvHash* out) {
  auto view = ctx.store->view();
  uint32_t hash = 0;
  if (Error e = mvcc::etcd_hash_kv(*view, revision, &hash)) return e;
  out->hash = hash;
  out->revision = view->revision();
  out->hash_revision = revision > 0 ? revision : view->revision();
  out->compact_revision = view->compact_revision();
  return {};
}

Error hash(const Context& ctx, uint32_t* out, int64_t* revision) {
  auto view = ctx.store->view();
  if (Error e = etcd_snapshot::etcd_hash(snapshot_tables(ctx), *view, out)) return e;
  *revision = view->revision();
  return {};
}

Error write_snapshot(const Context& ctx, const std::string& path) {
  auto view = ctx.store->view();
  const int64_t revision = view->revision();
  spdlog::info("building a database snapshot for a client at revision {}", revision);
  // Progress at most once a second (common/progress.h): the key bucket is
  // written in revision order, most of the file.
  common::ProgressPacer pacer;
  return etcd_snapshot::write_etcd_snapshot(snapshot_tables(ctx), *view, path, [&](int64_t at, int64_t entries) {
    if (!pacer.due()) return;
    spdlog::info("building a database snapshot for a client: at revision {} of {}, {} key revisions written, {} ms",
                 at, revision, entries, pacer.elapsed_ms());
  });
}

std::string snapshot_dir(const Context& ctx) {
  return std::filesystem::path(ctx.store->engine()->dir()).parent_path().string();
}

Error read_checkpoint(const Context& ctx, uint64_t min_index, const SnapshotVisitor& fn) {
  return ctx.checkpoints->read(min_index, [&fn](storage::Cf cf, std::string_view key, std::string_view value) {
    return fn(static_cast<uint32_t>(cf), key, value);
  });
}

}  // namespace etcdq::member::maintenance
