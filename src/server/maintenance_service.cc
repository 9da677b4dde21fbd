#include "server/maintenance_service.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/progress.h"
#include "member/maintenance.h"
#include "member/pipeline.h"
#include "server/blocking_writer.h"
#include "server/downgrade.h"

namespace etcdq::server {

grpc::ServerUnaryReactor* MaintenanceService::Status(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::StatusRequest*,
                                                     etcdserverpb::StatusResponse* resp) {
  auto* reactor = c->DefaultReactor();
  // etcd's requireAuthInfo: any user.
  if (Error e = check_caller(ctx_, c, [this](const member::Caller& who) { return member::require_user(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  auto p = ctx_->consensus->progress();
  member::maintenance::DbSize size = member::maintenance::db_size(*ctx_);
  resp->set_version(kEtcdApiVersion);
  resp->set_dbsize(size.bytes);
  resp->set_dbsizeinuse(size.in_use_bytes);
  resp->set_leader(p.leader_id);
  resp->set_raftindex(p.commit_index);
  resp->set_raftterm(p.term);
  resp->set_raftappliedindex(p.applied_index);
  for (const auto& m : ctx_->membership->members()) {
    if (m.id == ctx_->self.id) resp->set_islearner(m.learner);
  }
  // etcd 3.6's fields: the quota in force (--quota-backend-bytes, its 2 GiB
  // default for 0), the storage version, and no downgrade ever enabled.
  resp->set_dbsizequota(ctx_->limits.quota_bytes);
  resp->set_storageversion(storage_version(kEtcdApiVersion));
  resp->mutable_downgradeinfo()->set_enabled(false);
  // etcd (3.5 and 3.6) lists a missing leader first, then the alarms.
  if (p.leader_id == 0) resp->add_errors(errors::no_leader().message());
  for (const auto& a : member::maintenance::alarms(*ctx_, 0, etcdserverpb::NONE)) {
    resp->add_errors("memberID:" + std::to_string(a.memberid()) + " alarm:" + etcdserverpb::AlarmType_Name(a.alarm()) +
                     " ");
  }
  ctx_->fill_header(resp->mutable_header());
  finish(reactor, {});
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::Alarm(grpc::CallbackServerContext* c,
                                                    const etcdserverpb::AlarmRequest* req,
                                                    etcdserverpb::AlarmResponse* resp) {
  auto* reactor = c->DefaultReactor();
  Context* ctx = ctx_;
  // etcd's authMaintenanceServer: GET needs a user, changes the root role
  // (checked again at apply, as the command's).
  if (Error e = check_caller(ctx_, c, [ctx, req](const member::Caller& who) {
        return req->action() == etcdserverpb::AlarmRequest::GET ? member::require_user(*ctx, who)
                                                                 : member::check_admin(*ctx, who);
      })) {
    finish(reactor, e);
    return reactor;
  }
  // etcd 3.5 fills the whole header, revision included (v3rpc/
  // maintenance.go Alarm; 3.4 sent none).
  if (req->action() == etcdserverpb::AlarmRequest::GET) {
    for (auto& m : member::maintenance::alarms(*ctx, req->memberid(), req->alarm())) *resp->add_alarms() = std::move(m);
    ctx->fill_header(resp->mutable_header());
    finish(reactor, {});
    return reactor;
  }
  apply::Command cmd;
  *cmd.mutable_alarm() = *req;
  if (!stamp_caller(ctx_, c, reactor, &cmd)) return reactor;
  propose_and_answer(ctx, std::move(cmd), resp, reactor);
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::Defragment(grpc::CallbackServerContext* c,
                                                         const etcdserverpb::DefragmentRequest*,
                                                         etcdserverpb::DefragmentResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = check_caller(ctx_, c, [this](const member::Caller& who) { return member::check_admin(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  Context* ctx = ctx_;
  // A full RocksDB compaction reclaims what etcd's defrag reclaims, while
  // reads and writes go on. Run it off the gRPC thread.
  // etcd's answer is empty: no header (v3rpc/maintenance.go Defragment).
  (void)resp;
  std::thread([ctx, reactor] { finish(reactor, member::maintenance::defragment(*ctx)); }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::MoveLeader(grpc::CallbackServerContext* c,
                                                         const etcdserverpb::MoveLeaderRequest* req,
                                                         etcdserverpb::MoveLeaderResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = check_caller(ctx_, c, [this](const member::Caller& who) { return member::check_admin(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  Context* ctx = ctx_;
  // etcd: only the leader transfers its leadership (etcdctl finds it).
  if (!ctx->consensus->progress().is_leader) {
    finish(reactor, errors::not_leader());
    return reactor;
  }
  // etcd's answer is empty: no header (v3rpc/maintenance.go MoveLeader).
  (void)resp;
  ctx->membership->transfer_leadership(req->targetid(), [reactor](Error e) {
    finish(reactor, e);
  });
  return reactor;
}

namespace {

// Hash and HashKV each make a full pass (and, after a compaction, hold the
// kept revisions in memory, mvcc/etcd_keys.h): at most kMaxHashes at once.
// The slot frees itself when the last copy of the pointer goes.
struct HashSlot {
  std::shared_ptr<std::atomic<int>> running;
  ~HashSlot() {
    if (running) running->fetch_sub(1);
  }
};

std::shared_ptr<HashSlot> hash_slot(const std::shared_ptr<std::atomic<int>>& running) {
  if (running->fetch_add(1) >= MaintenanceService::kMaxHashes) {
    running->fetch_sub(1);
    return nullptr;
  }
  auto slot = std::make_shared<HashSlot>();
  slot->running = running;
  return slot;
}

Error too_many_hashes() { return Error(Code::kResourceExhausted, "etcdserver: too many hash requests in progress"); }

}  // namespace

grpc::ServerUnaryReactor* MaintenanceService::HashKV(grpc::CallbackServerContext* c,
                                                     const etcdserverpb::HashKVRequest* req,
                                                     etcdserverpb::HashKVResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = check_caller(ctx_, c, [this](const member::Caller& who) { return member::check_admin(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  Context* ctx = ctx_;
  int64_t rev = req->revision();
  auto slot = hash_slot(hashes_);
  if (!slot) {
    finish(reactor, too_many_hashes());
    return reactor;
  }
  // A full pass over the key space: off the gRPC thread.
  std::thread([ctx, reactor, resp, rev, slot] {
    member::maintenance::KvHash h;
    if (Error e = member::maintenance::hash_kv(*ctx, rev, &h)) return finish(reactor, e);
    resp->set_hash(h.hash);
    // etcd's compactMainRev is -1 until the first compaction.
    resp->set_compact_revision(h.compact_revision > 0 ? h.compact_revision : -1);
    // etcd 3.6: the revision the hash covers (the current one for 0).
    resp->set_hash_revision(h.hash_revision);
    resp->mutable_header()->set_revision(h.revision);
    ctx->fill_header(resp->mutable_header());
    finish(reactor, {});
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::Hash(grpc::CallbackServerContext* c, const etcdserverpb::HashRequest*,
                                                   etcdserverpb::HashResponse* resp) {
  auto* reactor = c->DefaultReactor();
  if (Error e = check_caller(ctx_, c, [this](const member::Caller& who) { return member::check_admin(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  Context* ctx = ctx_;
  auto slot = hash_slot(hashes_);
  if (!slot) {
    finish(reactor, too_many_hashes());
    return reactor;
  }
  std::thread([ctx, reactor, resp, slot] {
    uint32_t hash = 0;
    int64_t revision = 0;
    if (Error e = member::maintenance::hash(*ctx, &hash, &revision)) return finish(reactor, e);
    resp->set_hash(hash);
    resp->mutable_header()->set_revision(revision);
    ctx->fill_header(resp->mutable_header());
    finish(reactor, {});
  }).detach();
  return reactor;
}

grpc::ServerUnaryReactor* MaintenanceService::Downgrade(grpc::CallbackServerContext* c,
                                                        const etcdserverpb::DowngradeRequest* req,
                                                        etcdserverpb::DowngradeResponse* resp) {
  auto* reactor = c->DefaultReactor();
  // etcd's authMaintenanceServer: root only.
  if (Error e = check_caller(ctx_, c, [this](const member::Caller& who) { return member::check_admin(*ctx_, who); })) {
    finish(reactor, e);
    return reactor;
  }
  if (Error e = answer_downgrade(kEtcdApiVersion, *req, resp)) {
    finish(reactor, e);
    return reactor;
  }
  ctx_->fill_header(resp->mutable_header());
  finish(reactor, {});
  return reactor;
}

namespace {

constexpr std::string_view kTempPrefix = "etcd-snapshot-";
constexpr std::string_view kTempSuffix = ".tmp";
constexpr size_t kChunkBytes = 32 * 1024;  // etcd's snapshotSendBufferSize
// A client that takes no chunk for this long is dropped (its temp file and
// read view would otherwise stay).
constexpr auto kSendStallLimit = std::chrono::minutes(2);

std::filesystem::path temp_dir(const Context& ctx) {
  return std::filesystem::path(member::maintenance::snapshot_dir(ctx));
}

class SnapshotStream final : public BlockingWriter<etcdserverpb::SnapshotResponse> {
 public:
  SnapshotStream(grpc::CallbackServerContext* call, Context* ctx, std::shared_ptr<std::atomic<int>> running)
      : BlockingWriter(call, kSendStallLimit), ctx_(ctx), running_(std::move(running)) {
    if (running_->fetch_add(1) >= MaintenanceService::kMaxSnapshots) {
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "etcdserver: too many snapshots in progress"));
      return;
    }
    static std::atomic<uint64_t> seq{0};
    path_ = (temp_dir(*ctx_) / (std::string(kTempPrefix) + std::to_string(getpid()) + "-" +
                                std::to_string(seq.fetch_add(1)) + std::string(kTempSuffix)))
                .string();
    std::thread([this] { run(); }).detach();
  }
  ~SnapshotStream() override { running_->fetch_sub(1); }

  void OnDone() override { delete this; }

 private:
  grpc::Status stream_file() {
    auto start = std::chrono::steady_clock::now();
    // The read view it wrote from is gone once this returns: RocksDB may
    // drop what it pinned while the file is sent.
    if (Error e = member::maintenance::write_snapshot(*ctx_, path_)) return to_grpc(e);
    std::ifstream in(path_, std::ios::binary);
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(path_, ec);
    constexpr uint64_t kSha256Bytes = member::maintenance::kSnapshotSha256Bytes;
    if (!in || ec || size < kSha256Bytes) return grpc::Status(grpc::StatusCode::INTERNAL, "cannot read " + path_);
    const uint64_t total = size - kSha256Bytes;
    spdlog::info("sending database snapshot to client: {} bytes, built in {} ms", total,
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
    std::string buf(kChunkBytes, '\0');
    uint64_t sent = 0;
    // etcd 3.6 names the storage version in every message (etcdctl prints
    // "Server version ..."); empty, as from etcd 3.5, below 3.6.
    chunk_.set_version(storage_version(kEtcdApiVersion));
    common::ProgressPacer pacer;
    while (sent < total) {
      // Progress at most once a second (etcd logs only start and end).
      if (pacer.due()) {
        spdlog::info("sending database snapshot to client: {} of {} bytes ({}%), {} ms", sent, total,
                     sent * 100 / total, pacer.elapsed_ms());
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, total - sent));
      if (!in.read(buf.data(), static_cast<std::streamsize>(n))) {
        return grpc::Status(grpc::StatusCode::INTERNAL, "cannot read " + path_);
      }
      sent += n;
      chunk_.set_remaining_bytes(total - sent);
      chunk_.set_blob(buf.data(), n);
      if (!send(&chunk_)) return grpc::Status::CANCELLED;
    }
    // The sha256 of the database, as the last message.
    if (!in.read(buf.data(), kSha256Bytes)) return grpc::Status(grpc::StatusCode::INTERNAL, "cannot read " + path_);
    chunk_.set_remaining_bytes(0);
    chunk_.set_blob(buf.data(), kSha256Bytes);
    if (!send(&chunk_)) return grpc::Status::CANCELLED;
    spdlog::info("sent database snapshot to client: {} bytes, took {} ms", total,
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
    return grpc::Status::OK;
  }

  void run() {
    grpc::Status s = stream_file();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) {
      spdlog::warn("snapshot for a client failed: {}", s.error_message());
    }
    Finish(s);
    // Finish may have run OnDone (and deleted this) already: nothing after it.
  }

  Context* ctx_;
  std::shared_ptr<std::atomic<int>> running_;
  std::string path_;
  etcdserverpb::SnapshotResponse chunk_;
};

}  // namespace

// A Snapshot refused before it started (auth).
class RefusedSnapshot final : public grpc::ServerWriteReactor<etcdserverpb::SnapshotResponse> {
 public:
  explicit RefusedSnapshot(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

grpc::ServerWriteReactor<etcdserverpb::SnapshotResponse>* MaintenanceService::Snapshot(
    grpc::CallbackServerContext* c, const etcdserverpb::SnapshotRequest*) {
  if (Error e = check_caller(ctx_, c, [this](const member::Caller& who) { return member::check_admin(*ctx_, who); })) {
    return new RefusedSnapshot(to_grpc(e));
  }
  return new SnapshotStream(c, ctx_, snapshots_);
}

void MaintenanceService::remove_leftover_snapshots() {
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(temp_dir(*ctx_), ec)) {
    std::string name = f.path().filename().string();
    if (name.starts_with(kTempPrefix) && name.ends_with(kTempSuffix)) {
      std::error_code rm;
      std::filesystem::remove(f.path(), rm);
      spdlog::info("removed the leftover snapshot file {}", f.path().string());
    }
  }
}

}  // namespace etcdq::server
