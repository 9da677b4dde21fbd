// Corrupts a stopped member's state offline, for the corruption check
// tests (tests/cluster/test_corruption_check.py): what a disk or a bug
// that changed stored bytes behind Raft's back leaves. Nothing in the
// server knows of this tool; it writes the RocksDB files as any outside
// damage would.
//
//   etcdq_kv_corrupt_tool DATA_DIR KEY NEW_VALUE
//
// Replaces the value of KEY's newest version (which must be a put) in the
// member's history and, when KEY is live, in its latest table, keeping its
// revisions: the key space then holds a value no client ever wrote, at a
// revision whose log entry wrote another. Exit status 0 on success, 1 with
// the reason on stderr (the member must be stopped: RocksDB's lock).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "mvcc/codec.h"
#include "storage/batch.h"
#include "storage/engine.h"

using namespace etcdq;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DATA_DIR KEY NEW_VALUE\n", argv[0]);
    return 1;
  }
  const std::string dir = (std::filesystem::path(argv[1]) / "member" / "db").string();
  const std::string key = argv[2], value = argv[3];
  if (!std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "%s: no such database\n", dir.c_str());
    return 1;
  }
  std::unique_ptr<storage::Engine> engine;
  if (Error e = storage::Engine::open(dir, &engine)) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return 1;
  }
  storage::Iterator it = engine->iterator(storage::Cf::kHistory);
  it.seek(mvcc::history_key_first(key));
  std::string found;
  mvcc::Revision rev;
  if (!it.valid() || !mvcc::decode_history_key(it.key(), &found, &rev) || found != key) {
    std::fprintf(stderr, "key %s has no history\n", key.c_str());
    return 1;
  }
  std::string record(it.value());
  mvccpb::KeyValue kv;
  if (record.empty() || static_cast<mvcc::RecordType>(record[0]) != mvcc::RecordType::kPut ||
      !mvcc::decode_record(std::string_view(record).substr(1), &kv)) {
    std::fprintf(stderr, "key %s: newest version is not a readable put\n", key.c_str());
    return 1;
  }
  kv.set_value(value);
  std::string encoded;
  mvcc::encode_record(kv, &encoded);
  storage::Batch batch(engine.get());
  batch.put(storage::Cf::kHistory, it.key(), std::string(1, static_cast<char>(mvcc::RecordType::kPut)) + encoded);
  std::string latest;
  if (engine->get(storage::Cf::kLatest, key, &latest)) batch.put(storage::Cf::kLatest, key, encoded);
  if (Error e = engine->write(batch)) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return 1;
  }
  if (Error e = engine->make_durable()) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return 1;
  }
  std::printf("key %s at revision %lld: value replaced\n", key.c_str(), static_cast<long long>(rev.main));
  return 0;
}
