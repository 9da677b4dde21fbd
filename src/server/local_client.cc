#include "server/local_client.h"

#include <atomic>
#include <memory>

#include "member/answers.h"
#include "member/kv.h"
#include "member/leases.h"
#include "member/reads.h"
#include "member/watches.h"

namespace etcdq::server {
namespace {

class InternalWatch final : public LocalClient::Watch, public member::WatchSink,
                            public std::enable_shared_from_this<InternalWatch> {
 public:
  InternalWatch(LocalClient* client, std::function<void(std::vector<mvccpb::Event>&&)> fn)
      : client_(client), fn_(std::move(fn)) {}

  void start(const member::WatchSpec& spec) { member::watches::add(*client_->context(), this, 0, spec); }

  // Hub lock held: hand the events to the executor. A recipe watches one
  // key or a small prefix, so the queue stays small.
  bool offer(const member::WatchBatch& b) override {
    auto self = weak_from_this().lock();
    if (!self) return true;  // being destroyed: it is about to leave the hub
    auto events = std::make_shared<std::vector<mvccpb::Event>>();
    events->reserve(b.events.size());
    for (const auto& r : b.events) {
      events->push_back(r.event->event());
      if (!r.with_prev) events->back().clear_prev_kv();
    }
    bool compacted = b.compact_revision != 0;
    client_->post([self, events, compacted] {
      if (self->canceled_) return;
      if (compacted) {
        // Cannot happen for a recipe watching from a fresh revision; treat
        // as "something changed" so the recipe re-reads.
        self->fn_({});
        return;
      }
      self->fn_(std::move(*events));
    });
    return true;
  }
  size_t room() const override { return SIZE_MAX; }

  void cancel() override {
    if (canceled_.exchange(true)) return;
    member::watches::remove(*client_->context(), this, 0);
  }
  ~InternalWatch() override { cancel(); }

 private:
  LocalClient* client_;
  std::function<void(std::vector<mvccpb::Event>&&)> fn_;
  std::atomic<bool> canceled_{false};
};

template <typename Resp>
void propose(LocalClient* c, apply::Command cmd, LocalClient::Done<Resp> done) {
  // The Lock and Election services checked their caller's permission over
  // every key the recipe touches on entry (server/context.h,
  // check_read_write): the recipe's own commands are internal.
  cmd.set_internal(true);
  // Through the proposal pipeline like every client write (its checks
  // include the quota that the recipes' puts are subject to, as in etcd).
  member::propose_for<Resp>(*c->context(), std::move(cmd), [c, done](member::Answer<Resp>&& a) {
    c->post([done, a = std::move(a)]() mutable { done(a.error, std::move(a.response)); });
  });
}

// A read for a recipe: linearizable, as clientv3's default; `done` on the
// client's executor.
template <typename Req, typename Resp>
void read(LocalClient* c, Req req,
          void (*serve)(member::Context&, member::ReadMode, const Req*, Resp*, std::function<Error()>,
                        std::function<void(Error)>),
          LocalClient::Done<Resp> done) {
  auto shared = std::make_shared<Req>(std::move(req));
  auto resp = std::make_shared<Resp>();
  serve(*c->context(), member::ReadMode::kLinearizable, shared.get(), resp.get(), {},
        [c, shared, resp, done](Error e) {
          if (e) resp->Clear();
          c->post([done, e, resp] { done(e, std::move(*resp)); });
        });
}

}  // namespace

LocalClient::LocalClient(Context* ctx) : ctx_(ctx) {}

LocalClient::~LocalClient() = default;

void LocalClient::post(std::function<void()> fn) { executor_.post(std::move(fn)); }

void LocalClient::txn(etcdserverpb::TxnRequest req, Done<etcdserverpb::TxnResponse> done) {
  if (Error e = member::kv::validate(*ctx_, req)) {
    post([done, e] { done(e, {}); });
    return;
  }
  if (member::kv::is_read_only(req)) {
    read<etcdserverpb::TxnRequest, etcdserverpb::TxnResponse>(this, std::move(req), &member::read_txn,
                                                                std::move(done));
    return;
  }
  apply::Command cmd;
  *cmd.mutable_txn() = std::move(req);
  propose<etcdserverpb::TxnResponse>(this, std::move(cmd), std::move(done));
}

void LocalClient::range(etcdserverpb::RangeRequest req, Done<etcdserverpb::RangeResponse> done) {
  read<etcdserverpb::RangeRequest, etcdserverpb::RangeResponse>(this, std::move(req), &member::range, std::move(done));
}

void LocalClient::del(std::string key, Done<etcdserverpb::DeleteRangeResponse> done) {
  apply::Command cmd;
  cmd.mutable_delete_range()->set_key(std::move(key));
  // As the KV service checks it: clientv3 inside etcd's Lock service gets
  // "key is not provided" for Unlock("").
  if (Error e = member::kv::validate(cmd.delete_range())) {
    post([done, e] { done(e, {}); });
    return;
  }
  propose<etcdserverpb::DeleteRangeResponse>(this, std::move(cmd), std::move(done));
}

void LocalClient::lease_grant(int64_t ttl, Done<etcdserverpb::LeaseGrantResponse> done) {
  apply::Command cmd;
  cmd.mutable_lease_grant()->set_ttl(ttl);
  cmd.mutable_lease_grant()->set_id(member::leases::next_id(*ctx_));
  propose<etcdserverpb::LeaseGrantResponse>(this, std::move(cmd), std::move(done));
}

std::shared_ptr<LocalClient::Watch> LocalClient::watch(std::string key, std::string end, int64_t start_rev,
                                                       std::function<void(std::vector<mvccpb::Event>&&)> on_events) {
  auto w = std::make_shared<InternalWatch>(this, std::move(on_events));
  member::WatchSpec spec;
  spec.key = std::move(key);
  spec.end = std::move(end);
  spec.start_revision = start_rev;
  w->start(spec);
  return w;
}

}  // namespace etcdq::server
