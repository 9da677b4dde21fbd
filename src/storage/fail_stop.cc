#include "storage/fail_stop.h"


#include "storage/failure.h"

namespace etcdq::storage {
namespace {

std::mutex& failure_handler_mu() {
  static std::mutex mu;
  return mu;
}
FailureHandler& failure_handler() {
  static FailureHandler fn;
  return fn;
}

const char* background_reason_name(rocksdb::BackgroundErrorReason r) {
  switch (r) {
    case rocksdb::BackgroundErrorReason::kFlush: return "flush";
    case rocksdb::BackgroundErrorReason::kCompaction: return "compaction";
    case rocksdb::BackgroundErrorReason::kWriteCallback: return "write";
    case rocksdb::BackgroundErrorReason::kMemTable: return "memtable insert";
    case rocksdb::BackgroundErrorReason::kManifestWrite: return "MANIFEST write";
    case rocksdb::BackgroundErrorReason::kFlushNoWAL: return "flush";
    case rocksdb::BackgroundErrorReason::kManifestWriteNoWAL: return "MANIFEST write";
  }
  return "background work";
}

class FailStopListener final : public rocksdb::EventListener {
 public:
  explicit FailStopListener(std::shared_ptr<FailStop> f) : f_(std::move(f)) {}
  const char* Name() const override { return "etcdq.FailStop"; }
  // RocksDB calls these without its DB mutex held (EventHelpers::
  // NotifyOnBackgroundError), so the handler may log and exit here.
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* s) override {
    f_->fail(background_reason_name(reason), *s);
  }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status, bool* auto_recovery) override {
    *auto_recovery = false;
  }

 private:
  std::shared_ptr<FailStop> f_;  // RocksDB may call after Engine is gone (its Close)
};

}  // namespace

void on_failure(FailureHandler fn) {
  std::lock_guard<std::mutex> lock(failure_handler_mu());
  failure_handler() = std::move(fn);
}

void FailStop::fail(std::string_view what, const rocksdb::Status& s) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    reason_ = "the state database in " + dir_ + " failed (" + std::string(what) + "): " + s.ToString();
    reason = reason_;
    failed_.store(true, std::memory_order_release);
  }
  FailureHandler fn;
  {
    std::lock_guard<std::mutex> lock(failure_handler_mu());
    fn = failure_handler();
  }
  if (fn) fn(reason);
}

Error FailStop::error() const {
  if (!failed()) return {};
  std::lock_guard<std::mutex> lock(mu_);
  return errors::internal(reason_);
}

std::shared_ptr<rocksdb::EventListener> FailStop::listener(std::shared_ptr<FailStop> f) {
  return std::make_shared<FailStopListener>(std::move(f));
}

}  // namespace etcdq::storage
