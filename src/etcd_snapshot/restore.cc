#include "etcd_snapshot/restore.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <filesystem>
#include <memory>

#include "auth/store.h"
#include "bbolt/reader.h"
#include "bbolt/snapshot_file.h"
#include "common/big_endian.h"
#include "etcd/api/mvccpb/kv.pb.h"
#include "mvcc/codec.h"
#include "keyspace/registry.h"
#include "storage/batch.h"
#include "storage/engine.h"
#include "storage/snapshot.h"

namespace etcdq::etcd_snapshot {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBatchBytes = 4 << 20;

Error corrupt(const std::string& path, const std::string& what) {
  return Error(Code::kDataLoss, "snapshot " + path + " is corrupt: " + what);
}

// etcd's revision key: 8-byte BE main, '_', 8-byte BE sub, optional 't'.
bool parse_revision_key(std::string_view k, mvcc::Revision* r, bool* tombstone) {
  if ((k.size() != 17 && k.size() != 18) || k[8] != '_') return false;
  if (k.size() == 18 && k[17] != 't') return false;
  r->main = static_cast<int64_t>(get_be64(k.data()));
  r->sub = static_cast<int64_t>(get_be64(k.data() + 9));
  *tombstone = k.size() == 18;
  return r->main >= 0 && r->sub >= 0;
}

bool read_varint(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// leasepb.Lease{ID: 1, TTL: 2, RemainingTTL: 3}: all int64 varints.
bool parse_lease(std::string_view in, int64_t* id, int64_t* ttl) {
  *id = 0;
  *ttl = 0;
  while (!in.empty()) {
    uint64_t tag = 0, v = 0;
    if (!read_varint(&in, &tag) || (tag & 7) != 0 || !read_varint(&in, &v)) return false;
    if ((tag >> 3) == 1) *id = static_cast<int64_t>(v);
    if ((tag >> 3) == 2) *ttl = static_cast<int64_t>(v);
  }
  return true;
}

// Writes batches of about kBatchBytes.
class BatchWriter {
 public:
  explicit BatchWriter(storage::Engine* e) : e_(e), b_(e) {}
  storage::Batch& batch() { return b_; }
  Error maybe_flush() { return b_.data_size() >= kBatchBytes ? flush() : Error{}; }
  Error flush() {
    if (b_.count() == 0) return {};
    Error err = e_->write(b_);
    b_.clear();
    return err;
  }

 private:
  storage::Engine* e_;
  storage::Batch b_;
};

// Revisions a restored member can go on from: etcd's are int64 and count
// up by one per write, so a file claiming one past 2^62 is damaged (and a
// member would overflow the next revision).
constexpr int64_t kMaxRevision = int64_t{1} << 62;

struct Compaction {
  int64_t finished = 0;
  int64_t scheduled = 0;
};

Error read_compaction(const bbolt::Reader& r, const std::string& path, Compaction* c) {
  Error e = r.for_each({"meta"}, [&](std::string_view k, std::string_view v) -> Error {
    if (k != "finishedCompactRev" && k != "scheduledCompactRev") return {};
    mvcc::Revision rev;
    bool tomb = false;
    if (!parse_revision_key(v, &rev, &tomb) || tomb) return corrupt(path, "meta/" + std::string(k) + " is not a revision");
    (k == "finishedCompactRev" ? c->finished : c->scheduled) = rev.main;
    return {};
  });
  if (e && e.code() == Code::kNotFound) return {};  // no meta bucket: never compacted
  if (e) return e;
  for (int64_t rev : {c->finished, c->scheduled}) {
    if (rev < 0 || rev >= kMaxRevision) return corrupt(path, "compaction revision " + std::to_string(rev) + " is out of range");
  }
  if (c->scheduled < c->finished) c->scheduled = c->finished;
  return {};
}

// The key bucket, in revision order, into history, revlog and latest.
Error copy_keys(const bbolt::Reader& r, const std::string& path, storage::Engine* engine, const Compaction& comp,
                const RestoreOptions& o, RestoreStats* stats) {
  BatchWriter w(engine);
  auto last_report = std::chrono::steady_clock::now();
  std::string rec, hist, log;
  mvccpb::KeyValue kv;
  mvcc::Revision last{0, 0};
  Error e = r.for_each({"key"}, [&](std::string_view k, std::string_view v) -> Error {
    mvcc::Revision rev;
    bool tomb = false;
    if (!parse_revision_key(k, &rev, &tomb)) return corrupt(path, "a key bucket entry has no revision key");
    if (rev.main < 1 || rev.main >= kMaxRevision) {
      return corrupt(path, "revision " + std::to_string(rev.main) + " in the key bucket is out of range");
    }
    if (!(last < rev)) return corrupt(path, "revisions out of order in the key bucket");
    last = rev;
    if (!kv.ParseFromArray(v.data(), static_cast<int>(v.size())) || kv.key().empty()) {
      return corrupt(path, "the value at revision " + std::to_string(rev.main) + "_" + std::to_string(rev.sub) +
                               " is not an mvccpb.KeyValue");
    }
    storage::Batch& b = w.batch();
    const std::string& key = kv.key();
    const auto type = tomb ? mvcc::RecordType::kDelete : mvcc::RecordType::kPut;
    if (tomb) {
      hist.assign(1, static_cast<char>(type));
      b.remove(storage::Cf::kLatest, key);
    } else {
      rec.clear();
      mvcc::encode_record(kv, &rec);
      b.put(storage::Cf::kLatest, key, rec);
      hist.assign(1, static_cast<char>(type));
      hist.append(rec);
    }
    b.put(storage::Cf::kHistory, mvcc::history_key(key, rev), hist);
    // The compactor keeps revlog entries from the compact revision on
    // (mvcc/compactor.cc); below it they are never read.
    if (rev.main >= comp.finished) {
      log.assign(1, static_cast<char>(type));
      log.append(key);
      b.put(storage::Cf::kRevlog, mvcc::revlog_key(rev), log);
    }
    ++stats->revisions;
    if (o.on_progress && (stats->revisions & 255) == 0) {
      if (auto now = std::chrono::steady_clock::now(); now - last_report >= o.progress_every) {
        last_report = now;
        o.on_progress({stats->revisions, rev.main, r.bytes_read(), r.pages_bytes()});
      }
    }
    return w.maybe_flush();
  });
  if (e) return e.code() == Code::kNotFound ? corrupt(path, "no key bucket") : e;
  if (Error f = w.flush()) return f;
  // A compaction may have removed the newest revisions (tombstones) from
  // the key bucket, so the finished compaction can be the current
  // revision; a scheduled one never passes it (etcd schedules at or below
  // its current revision).
  stats->revision = std::max<int64_t>({last.main, comp.finished, 1});
  if (comp.scheduled > stats->revision) {
    return corrupt(path, "compaction scheduled at revision " + std::to_string(comp.scheduled) +
                             ", beyond the current revision " + std::to_string(stats->revision));
  }
  return {};
}

// The lease -> key index (mvcc/codec.h) from the latest table, once it is
// complete: only then is each key's final lease known.
Error index_leases(storage::Engine* engine, RestoreStats* stats) {
  BatchWriter w(engine);
  mvccpb::KeyValue kv;
  // A bulk pass: what it reads stays out of the block cache.
  storage::Snapshot snap(engine);
  storage::Iterator it = snap.bulk_iterator(storage::Cf::kLatest);
  for (it.seek_to_first(); it.valid(); it.next()) {
    ++stats->keys;
    if (!mvcc::decode_record(it.value(), &kv)) return errors::internal("restore: unreadable record just written");
    if (kv.lease() == 0) continue;
    w.batch().put(storage::Cf::kMeta, mvcc::lease_index_key(kv.lease(), it.key()), "");
    if (Error e = w.maybe_flush()) return e;
  }
  return w.flush();
}

Error copy_leases(const bbolt::Reader& r, const std::string& path, storage::Engine* engine, RestoreStats* stats) {
  BatchWriter w(engine);
  Error e = r.for_each({"lease"}, [&](std::string_view k, std::string_view v) -> Error {
    int64_t id = 0, ttl = 0;
    if (k.size() != 8 || !parse_lease(v, &id, &ttl) || id != static_cast<int64_t>(get_be64(k.data()))) {
      return corrupt(path, "a lease bucket entry is not a leasepb.Lease");
    }
    w.batch().put(storage::Cf::kMeta, mvcc::lease_table_key(id), mvcc::encode_i64(ttl));
    ++stats->leases;
    return w.maybe_flush();
  });
  if (e && e.code() != Code::kNotFound) return e;
  return w.flush();
}

// Users, roles, the enabled flag and the auth revision, in the auth
// store's own records (auth/store.h etcd_bucket_record).
Error copy_auth(const bbolt::Reader& r, const std::string& path, storage::Engine* engine, RestoreStats* stats) {
  BatchWriter w(engine);
  for (const char* bucket : {"auth", "authRoles", "authUsers"}) {
    Error e = r.for_each({bucket}, [&](std::string_view k, std::string_view v) -> Error {
      std::string key, value;
      if (Error bad = auth::etcd_bucket_record(bucket, k, v, &key, &value)) return corrupt(path, bad.message());
      if (key.empty()) return {};
      w.batch().put(storage::Cf::kMeta, key, value);
      if (std::string_view(bucket) == "authUsers") ++stats->auth_users;
      if (std::string_view(bucket) == "authRoles") ++stats->auth_roles;
      if (std::string_view(bucket) == "auth" && k == "authEnabled") stats->auth_enabled = value == "1";
      return w.maybe_flush();
    });
    if (e && e.code() != Code::kNotFound) return e;
  }
  return w.flush();
}

// The index of the bootstrap configuration entry a restored member's log
// starts with (consensus/node.cc, raft_bootstrap).
constexpr int64_t kRestoredLogFloor = 1;

Error build(const RestoreOptions& o, const bbolt::Reader& r, const std::string& db_dir, RestoreStats* stats) {
  std::unique_ptr<storage::Engine> engine;
  if (Error e = storage::Engine::open(db_dir, &engine)) return e;
  Compaction comp;
  if (Error e = read_compaction(r, o.snapshot_path, &comp)) return e;
  if (Error e = copy_keys(r, o.snapshot_path, engine.get(), comp, o, stats)) return e;
  if (Error e = index_leases(engine.get(), stats)) return e;
  if (Error e = copy_leases(r, o.snapshot_path, engine.get(), stats)) return e;
  if (Error e = copy_auth(r, o.snapshot_path, engine.get(), stats)) return e;
  int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  for (const auto& kind : keyspace::kinds()) {
    std::string note;
    if (Error e = kind->rebuild(engine.get(), now_ms, &note)) return e;
    if (!note.empty()) stats->plugin_notes.push_back(std::move(note));
  }
  stats->compact_revision = comp.finished;
  storage::Batch meta(engine.get());
  meta.put(storage::Cf::kMeta, mvcc::kMetaRevision, mvcc::encode_i64(stats->revision));
  if (comp.scheduled > 0) {
    meta.put(storage::Cf::kMeta, mvcc::kMetaCompactScheduled, mvcc::encode_i64(comp.scheduled));
    meta.put(storage::Cf::kMeta, mvcc::kMetaCompactFinished, mvcc::encode_i64(comp.finished));
  }
  // The member bootstraps its Raft log at its first start: entry 1, the
  // configuration, does not build this state, so a member added later must
  // install it from a snapshot (consensus/fsm.h, Fsm::log_floor). The state
  // stands at that index (as etcd's restore sets its consistent index to
  // the snapshot's commit index): a snapshot taken of it says so, and a
  // member with no state installs it.
  meta.put(storage::Cf::kMeta, mvcc::kMetaLogFloor, mvcc::encode_i64(kRestoredLogFloor));
  meta.put(storage::Cf::kMeta, mvcc::kMetaAppliedIndex, mvcc::encode_i64(kRestoredLogFloor));
  if (Error e = engine->write(meta)) return e;
  if (o.store_identity) o.store_identity(engine.get());
  return engine->make_durable();
}

bool dir_empty_or_missing(const std::string& dir, bool* exists) {
  std::error_code ec;
  *exists = fs::exists(dir, ec);
  if (ec) return false;
  if (!*exists) return true;
  if (!fs::is_directory(dir, ec)) return false;
  return fs::directory_iterator(dir, ec) == fs::directory_iterator() && !ec;
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Temporary dirs of earlier restores into the same target that were killed
// (SIGKILL, power loss) before they could clean up: their process is gone.
void remove_stale_temp_dirs(const fs::path& target) {
  const std::string prefix = target.filename().string() + ".restore-tmp-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || !std::all_of(pid.begin(), pid.end(), ::isdigit)) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

}  // namespace

Error restore_etcd_snapshot(const RestoreOptions& o, RestoreStats* stats) {
  *stats = {};
  bool exists = false;
  if (!dir_empty_or_missing(o.data_dir, &exists)) {
    return Error(Code::kFailedPrecondition, "data-dir \"" + o.data_dir + "\" not empty or could not be read");
  }
  std::error_code ec;
  if (!fs::is_regular_file(o.snapshot_path, ec)) {
    return Error(Code::kNotFound, "snapshot " + o.snapshot_path + ": no such file");
  }
  // etcdctl's rule (v3_snapshot.go hasChecksum): a file with the trailer is
  // whole 512-byte blocks plus 32 bytes.
  const uint64_t size = fs::file_size(o.snapshot_path, ec);
  if (ec) return errors::internal("snapshot " + o.snapshot_path + ": " + ec.message());
  uint64_t db_bytes = size;
  if (size % 512 == bbolt::kSha256Bytes) {
    if (!o.skip_hash_check) {
      if (Error e = bbolt::check_sha256_trailer(o.snapshot_path, &db_bytes)) {
        if (e.code() == Code::kDataLoss) {
          return Error(Code::kDataLoss, "snapshot " + o.snapshot_path +
                                            " is corrupt: its sha256 does not match its content (" + e.message() +
                                            ")");
        }
        return e;
      }
    } else {
      db_bytes = size - bbolt::kSha256Bytes;
    }
  } else if (!o.skip_hash_check) {
    return Error(Code::kDataLoss, "snapshot " + o.snapshot_path +
                                      " missing hash but --skip-hash-check=false (truncated, or a copied db file: "
                                      "size " + std::to_string(size) + " is not whole 512-byte blocks plus a sha256)");
  }
  bbolt::Reader reader;
  if (Error e = reader.open(o.snapshot_path, db_bytes)) {
    if (e.code() == Code::kDataLoss) return corrupt(o.snapshot_path, e.message() + " (truncated or damaged)");
    return e;
  }

  const fs::path target = fs::absolute(o.data_dir).lexically_normal();
  const fs::path tmp = target.string() + ".restore-tmp-" + std::to_string(::getpid());
  remove_stale_temp_dirs(target);
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp / "member", ec);
  if (ec) return errors::internal("cannot create " + tmp.string() + ": " + ec.message());
  Error e = build(o, reader, (tmp / "member" / "db").string(), stats);
  if (e.code() == Code::kDataLoss && !e.message().starts_with("snapshot ")) {
    e = corrupt(o.snapshot_path, e.message());  // the bbolt reader's (a damaged page)
  }
  if (!e) {
    fsync_dir(tmp / "member");
    fsync_dir(tmp);
    if (exists) fs::remove(target, ec);  // empty (checked above)
    if (!ec) fs::rename(tmp, target, ec);
    if (ec) e = errors::internal("cannot move " + tmp.string() + " to " + target.string() + ": " + ec.message());
    else fsync_dir(target.parent_path());
  }
  if (e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    if (exists && !fs::exists(target, ignored)) fs::create_directory(target, ignored);
  }
  return e;
}

}  // namespace etcdq::etcd_snapshot
