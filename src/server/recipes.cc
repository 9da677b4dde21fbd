#include "server/recipes.h"

#include <cstdio>

namespace etcdq::server {
namespace {

class WaitDeletes final : public Recipe, public std::enable_shared_from_this<WaitDeletes> {
 public:
  WaitDeletes(LocalClient* c, std::string prefix, int64_t max_rev,
              std::function<void(Error, etcdserverpb::ResponseHeader)> done)
      : c_(c), prefix_(std::move(prefix)), max_rev_(max_rev), done_(std::move(done)) {}

  // etcd's waitDeletes: find the newest key created before ours, wait for
  // its deletion, repeat until none is left.
  void step() {
    if (canceled_) return;
    etcdserverpb::RangeRequest r = by_create(prefix_, /*newest=*/true);
    r.set_max_create_revision(max_rev_);
    auto self = shared_from_this();
    c_->range(r, [self](Error e, etcdserverpb::RangeResponse resp) {
      if (self->canceled_) return;
      if (e) return self->finish(e, {});
      if (resp.kvs_size() == 0) return self->finish({}, resp.header());
      std::string key = resp.kvs(0).key();
      self->watch_ = self->c_->watch(key, "", resp.header().revision(),
                                     [self](std::vector<mvccpb::Event>&& evs) {
                                       if (self->canceled_) return;
                                       bool deleted = evs.empty();  // empty: re-read
                                       for (const auto& ev : evs) deleted |= ev.type() == mvccpb::Event::DELETE;
                                       if (!deleted) return;
                                       self->watch_->cancel();
                                       self->watch_.reset();  // breaks the self-reference through the callback
                                       self->step();
                                     });
    });
  }

  void cancel() override {
    canceled_ = true;
    if (watch_) watch_->cancel();
    watch_.reset();
    // `done_` holds the call's state, which holds this recipe: dropped
    // here (and in finish()) so that neither keeps the other alive.
    done_ = nullptr;
  }

 private:
  void finish(Error e, etcdserverpb::ResponseHeader h) {
    auto done = std::move(done_);
    cancel();
    done(e, h);
  }

  LocalClient* c_;
  std::string prefix_;
  int64_t max_rev_;
  std::function<void(Error, etcdserverpb::ResponseHeader)> done_;
  std::shared_ptr<LocalClient::Watch> watch_;
  bool canceled_ = false;
};

}  // namespace

void RecipeCallState::finish(const Error& e) {
  if (!call) return;
  if (e) abandon();
  auto* r = call;
  call = nullptr;
  r->Finish(service_status(e));
}

RecipeReactor::RecipeReactor(std::shared_ptr<RecipeCallState> st, std::function<void()> start) : st_(std::move(st)) {
  st_->call = this;
  st_->c->post(std::move(start));
}

void RecipeReactor::OnCancel() {
  auto st = st_;
  st->c->post([st] {
    st->canceled = true;
    if (st->wait) st->wait->cancel();
    st->finish(Error(Code::kCancelled, "context canceled"));
  });
}

std::string session_key(const std::string& prefix, int64_t lease) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(lease));
  return prefix + hex;
}

etcdserverpb::RangeRequest by_create(const std::string& prefix, bool newest) {
  etcdserverpb::RangeRequest r;
  r.set_key(prefix);
  r.set_range_end(prefix_end(prefix));
  r.set_sort_target(etcdserverpb::RangeRequest::CREATE);
  r.set_sort_order(newest ? etcdserverpb::RangeRequest::DESCEND : etcdserverpb::RangeRequest::ASCEND);
  r.set_limit(1);
  return r;
}

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // all keys
}

std::shared_ptr<Recipe> wait_deletes(LocalClient* c, std::string prefix, int64_t max_create_rev,
                                     std::function<void(Error, etcdserverpb::ResponseHeader)> done) {
  auto w = std::make_shared<WaitDeletes>(c, std::move(prefix), max_create_rev, std::move(done));
  w->step();
  return w;
}

void put_if_absent(LocalClient* c, const std::string& prefix, const std::string& key, const std::string& value,
                   int64_t lease, std::function<void(Error, etcdserverpb::TxnResponse, int64_t)> done) {
  etcdserverpb::TxnRequest t;
  auto* cmp = t.add_compare();
  cmp->set_key(key);
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_create_revision(0);
  auto* put = t.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  t.add_failure()->mutable_request_range()->set_key(key);
  // The current holder, to finish the uncontended case in one round trip.
  for (auto* branch : {t.mutable_success(), t.mutable_failure()}) {
    *branch->Add()->mutable_request_range() = by_create(prefix, /*newest=*/false);
  }
  c->txn(std::move(t), [done](Error e, etcdserverpb::TxnResponse resp) {
    if (e) return done(e, resp, 0);
    int64_t rev = resp.header().revision();
    if (!resp.succeeded()) {
      const auto& got = resp.responses(0).response_range();
      if (got.kvs_size() == 0) return done(errors::internal("session key vanished"), resp, 0);
      rev = got.kvs(0).create_revision();
    }
    done({}, resp, rev);
  });
}

}  // namespace etcdq::server
