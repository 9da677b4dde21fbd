// lease-keepalive: grants --leases leases (TTL 60 s), opens one
// LeaseKeepAlive stream per client, and times keep-alive round trips: each
// request writes one LeaseKeepAliveRequest for one of the leases and waits
// for its answer, which must name that lease with a positive TTL.
#include <condition_variable>
#include <mutex>

#include "loadgen/workload.h"

namespace loadgen {
namespace {

constexpr int64_t kLeaseTtlS = 60;

// One client's stream. One keep-alive in flight at a time (the runner's
// closed loop), so one write and one read are outstanding at most.
class KeepAliveStream final
    : public grpc::ClientBidiReactor<etcdserverpb::LeaseKeepAliveRequest, etcdserverpb::LeaseKeepAliveResponse> {
 public:
  explicit KeepAliveStream(etcdserverpb::Lease::Stub* stub) {
    stub->async()->LeaseKeepAlive(&ctx_, this);
    StartCall();
  }
  // Sends a keep-alive for `id`; `done` runs when its answer arrives or the
  // stream fails.
  void keep_alive(int64_t id, Done done) {
    bool write_now = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (broken_) {
        done(Outcome{0, "keep-alive stream closed"});
        return;
      }
      done_ = std::move(done);
      id_ = id;
      // The answer to the last keep-alive can arrive before gRPC reports its
      // write done; one write at a time, so this one waits for that.
      if (writing_) {
        write_pending_ = true;
      } else {
        writing_ = true;
        req_.set_id(id);
        write_now = true;
      }
    }
    StartRead(&resp_);
    if (write_now) StartWrite(&req_);
  }
  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!ok || !write_pending_) {
        writing_ = false;
        write_pending_ = false;
        return;
      }
      write_pending_ = false;
      req_.set_id(id_);
    }
    StartWrite(&req_);
  }
  void OnReadDone(bool ok) override {
    Done d;
    Outcome out;
    {
      std::lock_guard<std::mutex> lk(mu_);
      d = std::move(done_);
      done_ = nullptr;
      if (!ok) {
        out.error = "keep-alive stream closed";
        broken_ = true;  // no more operations on a stream that is ending
      } else if (resp_.id() != id_ || resp_.ttl() <= 0)
        out.error =
            "check: keep-alive answer for lease " + std::to_string(resp_.id()) + " ttl " + std::to_string(resp_.ttl());
    }
    if (d) d(std::move(out));
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> lk(mu_);
    status_ = s;
    finished_ = true;
    cv_.notify_all();
  }
  void cancel() { ctx_.TryCancel(); }
  void wait_done() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return finished_; });
  }

 private:
  grpc::ClientContext ctx_;
  etcdserverpb::LeaseKeepAliveRequest req_;
  etcdserverpb::LeaseKeepAliveResponse resp_;
  std::mutex mu_;
  std::condition_variable cv_;
  Done done_;
  int64_t id_ = 0;
  bool writing_ = false, write_pending_ = false;
  bool broken_ = false;
  bool finished_ = false;
  grpc::Status status_;
};

class LeaseKeepAliveWorkload : public Workload {
 public:
  LeaseKeepAliveWorkload(const Options& o, Connections* c) : o_(o), c_(c) {}
  ~LeaseKeepAliveWorkload() override { close(); }
  std::vector<std::string> op_names() const override { return {"keep-alive"}; }
  bool prepare(std::string* error) override {
    for (int i = 0; i < o_.leases; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      etcdserverpb::LeaseGrantRequest req;
      etcdserverpb::LeaseGrantResponse resp;
      req.set_ttl(kLeaseTtlS);
      grpc::Status s = c_->lease[static_cast<size_t>(i) % c_->lease.size()]->LeaseGrant(&ctx, req, &resp);
      if (!s.ok() || !resp.error().empty() || resp.id() == 0) {
        *error = "LeaseGrant: " + (s.ok() ? resp.error() : s.error_message());
        return false;
      }
      leases_.push_back(resp.id());
    }
    for (int i = 0; i < o_.clients; ++i)
      streams_.push_back(std::make_unique<KeepAliveStream>(c_->lease[c_->of_client(i)].get()));
    return true;
  }
  void issue(int client, int64_t seq, Done done) override {
    streams_[static_cast<size_t>(client)]->keep_alive(leases_[static_cast<size_t>(seq) % leases_.size()],
                                                      std::move(done));
  }
  int64_t finish(std::map<std::string, int64_t>* checks) override {
    close();
    // Revoke what we granted, so that a later workload's server is not
    // expiring them meanwhile; failures here do not count against the run.
    int64_t revoked = 0;
    for (int64_t id : leases_) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      etcdserverpb::LeaseRevokeRequest req;
      etcdserverpb::LeaseRevokeResponse resp;
      req.set_id(id);
      if (c_->lease[0]->LeaseRevoke(&ctx, req, &resp).ok()) ++revoked;
    }
    (*checks)["leases"] = static_cast<int64_t>(leases_.size());
    (*checks)["leases_revoked"] = revoked;
    leases_.clear();
    return 0;
  }

 private:
  void close() {
    for (auto& s : streams_) s->cancel();
    for (auto& s : streams_) s->wait_done();
    streams_.clear();
  }
  const Options& o_;
  Connections* c_;
  std::vector<int64_t> leases_;
  std::vector<std::unique_ptr<KeepAliveStream>> streams_;
};

}  // namespace

std::unique_ptr<Workload> make_lease_workload(const Options& o, Connections* c) {
  return std::make_unique<LeaseKeepAliveWorkload>(o, c);
}

}  // namespace loadgen
