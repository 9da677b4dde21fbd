// k8s: a mix shaped like the Kubernetes API server's use of etcd
// (k8s.io/apiserver's storage/etcd3 store), under /registry/pods/ns<i>/:
//
//   list    5 %  paginated Range of one namespace: --k8s-page keys a page,
//                the next page from the last key + "\0", every page at the
//                first page's revision (as the API server's continue tokens);
//   get    25 %  linearizable Range of one of the client's objects;
//   create 15 %  Txn(if mod_revision(key) == 0 then put else get);
//   update 45 %  Txn(if mod_revision(key) == cached then put else get);
//   delete 10 %  Txn(if mod_revision(key) == cached then delete else get).
//
// Each client owns its objects (pod-<client>-<n>, at most 64 live), so each
// of its compares must hold: a failed one is a wrong answer. A list's pages
// must add up to the first page's count, in key order. --k8s-watchers
// streams watch /registry/ with prev_kv and progress_notify from the run's
// first revision; each must get every acknowledged write exactly once in
// revision order, updates and deletes with the right prev_kv, and answer a
// progress request at the end with a revision no older than the last write.
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "common/grpc_client.h"
#include "loadgen/workload.h"

namespace loadgen {
namespace {

enum Op { kList, kGet, kCreate, kUpdate, kDelete };
constexpr size_t kMaxObjectsPerClient = 64;
const std::string kRoot = "/registry/";

std::string prefix_end(std::string p) {
  p.back() = static_cast<char>(p.back() + 1);  // prefixes end in '/': no carry
  return p;
}

struct Object {
  std::string key;
  int64_t mod_revision = 0;
};

// Touched only by its client's chain of requests (one at a time).
struct ClientState {
  std::vector<Object> objects;
  int64_t next_id = 0;
};

// One watch stream on /registry/. Read side state is touched by gRPC's
// reader callbacks only (one at a time); the counters are atomics.
class K8sWatch final : public grpc::ClientBidiReactor<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse> {
 public:
  K8sWatch(etcdserverpb::Watch::Stub* stub, int64_t start_revision) {
    stub->async()->Watch(&ctx_, this);
    auto* c = req_.mutable_create_request();
    c->set_key(kRoot);
    c->set_range_end(prefix_end(kRoot));
    c->set_start_revision(start_revision);
    c->set_prev_kv(true);
    c->set_progress_notify(true);
    writing_ = true;
    StartWrite(&req_);
    StartRead(&resp_);
    StartCall();
  }
  void OnWriteDone(bool) override {
    std::lock_guard<std::mutex> lk(mu_);
    writing_ = false;
    cv_.notify_all();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    const auto& r = resp_;
    if (r.created()) {
      created_.store(r.canceled() ? -1 : 1);
    } else if (r.canceled()) {
      ++violations_;  // nothing here should cancel a watcher
    } else if (r.events_size() == 0) {
      progress_rev_.store(r.header().revision());
      progress_.fetch_add(1);
    } else {
      for (const auto& ev : r.events()) check(ev);
      events_.fetch_add(r.events_size());
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      cv_.notify_all();
    }
    StartRead(&resp_);
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> lk(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }

  // 1 created, -1 refused, 0 not yet.
  int created() const { return created_.load(); }
  int64_t events() const { return events_.load(); }
  int64_t violations() const { return violations_.load(); }
  int64_t progress_responses() const { return progress_.load(); }
  int64_t progress_revision() const { return progress_rev_.load(); }
  // Waits for the create write, then asks for a progress notification.
  void request_progress() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !writing_ || done_; });
    if (done_) return;
    writing_ = true;
    req_.Clear();
    req_.mutable_progress_request();
    StartWrite(&req_);
  }
  // Waits up to `ns` for pred() (re-checked on every response).
  template <typename Pred>
  bool wait_for(int64_t ns, Pred pred) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::nanoseconds(ns), [&] { return pred() || done_; }) && pred();
  }
  // Cancels and waits for the end; true if it ended only because of that.
  bool close() {
    ctx_.TryCancel();
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
    return status_.error_code() == grpc::StatusCode::CANCELLED;
  }

 private:
  void check(const mvccpb::Event& ev) {
    const auto& kv = ev.kv();
    if (kv.mod_revision() <= last_rev_) ++violations_;
    last_rev_ = kv.mod_revision();
    if (ev.type() == mvccpb::Event::PUT) {
      if (kv.version() == 1) {
        if (ev.has_prev_kv() && !ev.prev_kv().key().empty()) ++violations_;
      } else if (!ev.has_prev_kv() || ev.prev_kv().version() != kv.version() - 1 ||
                 ev.prev_kv().mod_revision() >= kv.mod_revision()) {
        ++violations_;
      }
    } else if (!ev.has_prev_kv() || ev.prev_kv().key() != kv.key()) {
      ++violations_;
    }
  }

  grpc::ClientContext ctx_;
  etcdserverpb::WatchRequest req_;
  etcdserverpb::WatchResponse resp_;
  int64_t last_rev_ = 0;  // reader only
  std::atomic<int> created_{0};
  std::atomic<int64_t> events_{0}, violations_{0}, progress_{0}, progress_rev_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false, done_ = false;  // under mu_
  grpc::Status status_;
};

// A paginated list in flight: one Range per page.
struct ListOp {
  std::string prefix, end;
  int64_t revision = 0, expected = 0, seen = 0;
  std::string last_key;
  int pages = 0;
  Done done;
};

class K8sWorkload : public Workload {
 public:
  K8sWorkload(const Options& o, Connections* c)
      : o_(o), c_(c), clients_(static_cast<size_t>(o.clients)), value_(static_cast<size_t>(o.value_size), 'k') {}
  ~K8sWorkload() override {
    for (auto& w : watches_) w->close();
  }
  std::vector<std::string> op_names() const override { return {"list", "get", "create", "update", "delete"}; }

  bool prepare(std::string* error) override {
    // Objects of an earlier run stay; names carry this run's start so that
    // creates are of new keys.
    run_id_ = std::to_string(bench::now_ns() / 1000000 % 100000000);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    etcdserverpb::RangeRequest req;
    etcdserverpb::RangeResponse resp;
    req.set_key(kRoot);
    req.set_range_end(prefix_end(kRoot));
    req.set_count_only(true);
    grpc::Status s = c_->kv[0]->Range(&ctx, req, &resp);
    if (!s.ok()) {
      *error = "Range for the start revision: " + s.error_message();
      return false;
    }
    for (int i = 0; i < o_.k8s_watchers; ++i)
      watches_.push_back(std::make_unique<K8sWatch>(c_->watch[static_cast<size_t>(i) % c_->watch.size()].get(),
                                                    resp.header().revision() + 1));
    for (auto& w : watches_) {
      if (!w->wait_for(10'000'000'000, [&] { return w->created() != 0; }) || w->created() != 1) {
        *error = "a watcher on /registry/ was not created";
        return false;
      }
    }
    return true;
  }

  void issue(int client, int64_t seq, Done done) override {
    ClientState& st = clients_[static_cast<size_t>(client)];
    const int r = static_cast<int>(mix64(static_cast<uint64_t>(seq) ^ 0x6b387300ULL) % 100);
    Op op = r < 5 ? kList : r < 30 ? kGet : r < 45 ? kCreate : r < 90 ? kUpdate : kDelete;
    if (st.objects.empty() && op != kList) op = kCreate;
    if (op == kCreate && st.objects.size() >= kMaxObjectsPerClient) op = kDelete;
    const std::string ns = "/registry/pods/ns" + std::to_string(client % o_.k8s_namespaces) + "/";
    switch (op) {
      case kList:
        return list(ns, client, std::move(done));
      case kGet:
        return get(st, static_cast<size_t>(seq), client, std::move(done));
      default:
        return write(op, st, ns, static_cast<size_t>(seq), client, std::move(done));
    }
  }

  int64_t finish(std::map<std::string, int64_t>* checks) override {
    const int64_t writes = writes_ok_.load();
    int64_t violations = 0, delivered_min = INT64_MAX, progress = 0;
    const int64_t drain_ns = static_cast<int64_t>(o_.drain_seconds * 1e9);
    const int64_t deadline = bench::now_ns() + drain_ns;
    for (auto& w : watches_) {
      w->wait_for(std::max<int64_t>(0, deadline - bench::now_ns()), [&] { return w->events() >= writes; });
      w->request_progress();
      // A progress response says the watcher has seen everything up to its
      // revision; it must not be older than the last acknowledged write.
      w->wait_for(5'000'000'000, [&] { return w->progress_revision() >= last_write_rev_.load(); });
      if (w->progress_revision() < last_write_rev_.load()) ++violations;
      if (w->events() != writes) ++violations;
      violations += w->violations();
      delivered_min = std::min(delivered_min, w->events());
      progress += w->progress_responses();
    }
    for (auto& w : watches_)
      if (!w->close()) ++violations;
    watches_.clear();
    (*checks)["writes_acknowledged"] = writes;
    (*checks)["compare_failed"] = compare_failed_.load();
    (*checks)["list_pages"] = pages_.load();
    (*checks)["watchers"] = o_.k8s_watchers;
    if (o_.k8s_watchers > 0) {
      (*checks)["watch_events_min_per_watcher"] = delivered_min;
      (*checks)["progress_responses"] = progress;
    }
    return violations;
  }

 private:
  using TxnCall = Call<etcdserverpb::TxnRequest, etcdserverpb::TxnResponse>;
  using RangeCall = Call<etcdserverpb::RangeRequest, etcdserverpb::RangeResponse>;

  static std::string status_error(const grpc::Status& s) {
    return s.error_message().empty() ? "gRPC code " + std::to_string(s.error_code()) : s.error_message();
  }

  void get(ClientState& st, size_t pick, int client, Done done) {
    const Object obj = st.objects[pick % st.objects.size()];
    auto* call = new RangeCall;
    call->req.set_key(obj.key);
    c_->kv[c_->of_client(client)]->async()->Range(
        &call->ctx, &call->req, &call->resp, [call, obj, done](grpc::Status s) {
          Outcome out{kGet, ""};
          if (!s.ok())
            out.error = status_error(s);
          else if (call->resp.kvs_size() != 1 || call->resp.kvs(0).mod_revision() != obj.mod_revision)
            out.error = "check: get did not return the object's last write";
          delete call;
          done(std::move(out));
        });
  }

  void write(Op op, ClientState& st, const std::string& ns, size_t pick, int client, Done done) {
    auto* call = new TxnCall;
    size_t index = 0;
    std::string key;
    int64_t expect_rev = 0;
    if (op == kCreate) {
      key = ns + "pod-" + run_id_ + "-" + std::to_string(client) + "-" + std::to_string(st.next_id++);
    } else {
      index = pick % st.objects.size();
      key = st.objects[index].key;
      expect_rev = st.objects[index].mod_revision;
    }
    auto* cmp = call->req.add_compare();
    cmp->set_key(key);
    cmp->set_target(etcdserverpb::Compare::MOD);
    cmp->set_result(etcdserverpb::Compare::EQUAL);
    cmp->set_mod_revision(expect_rev);
    if (op == kDelete) {
      call->req.add_success()->mutable_request_delete_range()->set_key(key);
    } else {
      auto* put = call->req.add_success()->mutable_request_put();
      put->set_key(key);
      put->set_value(value_);
    }
    call->req.add_failure()->mutable_request_range()->set_key(key);
    c_->kv[c_->of_client(client)]->async()->Txn(
        &call->ctx, &call->req, &call->resp, [this, call, op, &st, index, key, done](grpc::Status s) {
          Outcome out{op, ""};
          const auto& r = call->resp;
          if (!s.ok()) {
            out.error = status_error(s);
          } else if (!r.succeeded()) {
            compare_failed_.fetch_add(1);
            out.error = "check: compare on the client's own object failed";
          } else if (op == kDelete &&
                     (r.responses_size() != 1 || r.responses(0).response_delete_range().deleted() != 1)) {
            out.error = "check: delete of a live object deleted nothing";
          } else {
            const int64_t rev = r.header().revision();
            if (op == kCreate)
              st.objects.push_back({key, rev});
            else if (op == kUpdate)
              st.objects[index].mod_revision = rev;
            else {
              st.objects[index] = std::move(st.objects.back());
              st.objects.pop_back();
            }
            writes_ok_.fetch_add(1);
            int64_t prev = last_write_rev_.load();
            while (prev < rev && !last_write_rev_.compare_exchange_weak(prev, rev)) {
            }
          }
          delete call;
          done(std::move(out));
        });
  }

  void list(const std::string& ns, int client, Done done) {
    auto* l = new ListOp;
    l->prefix = ns;
    l->end = prefix_end(ns);
    l->done = std::move(done);
    next_page(l, client);
  }

  void next_page(ListOp* l, int client) {
    auto* call = new RangeCall;
    call->req.set_key(l->pages == 0 ? l->prefix : l->last_key + std::string(1, '\0'));
    call->req.set_range_end(l->end);
    call->req.set_limit(o_.k8s_page);
    call->req.set_revision(l->revision);
    c_->kv[c_->of_client(client)]->async()->Range(
        &call->ctx, &call->req, &call->resp, [this, call, l, client](grpc::Status s) {
          const auto& r = call->resp;
          std::string error;
          if (!s.ok()) {
            error = status_error(s);
          } else {
            if (l->pages == 0) {
              l->revision = r.header().revision();
              l->expected = r.count();
            }
            for (const auto& kv : r.kvs()) {
              if (!l->last_key.empty() && kv.key() <= l->last_key) error = "check: list page out of key order";
              l->last_key = kv.key();
            }
            l->seen += r.kvs_size();
            ++l->pages;
            pages_.fetch_add(1);
            if (r.more() && r.kvs_size() > 0 && error.empty()) {
              delete call;
              return next_page(l, client);
            }
            if (error.empty() && l->seen != l->expected)
              error = "check: list pages held " + std::to_string(l->seen) + " keys, first page counted " +
                      std::to_string(l->expected);
          }
          delete call;
          Done d = std::move(l->done);
          delete l;
          d(Outcome{kList, error});
        });
  }

  const Options& o_;
  Connections* c_;
  std::vector<ClientState> clients_;
  std::string value_;
  std::string run_id_;
  std::vector<std::unique_ptr<K8sWatch>> watches_;
  std::atomic<int64_t> writes_ok_{0}, compare_failed_{0}, pages_{0}, last_write_rev_{0};
};

}  // namespace

std::unique_ptr<Workload> make_k8s_workload(const Options& o, Connections* c) {
  return std::make_unique<K8sWorkload>(o, c);
}

}  // namespace loadgen
