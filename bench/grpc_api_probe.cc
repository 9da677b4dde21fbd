// How much of a put's time is gRPC's API, not etcdq: a minimal etcd KV
// server (Put and Range on a std::map, nothing else) served either through
// gRPC's callback API, as etcdq's services are, or through the completion
// queue API with threads of its own polling the queues. Optionally each put
// goes the way a put goes in a member: handed to one "log" thread that
// writes the batch it has, fdatasyncs it (group commit) and answers from
// there. Measured with etcdq_loadgen / etcd's benchmark like a server.
//
//   grpc_api_probe --listen 127.0.0.1:P --api callback|cq [--cq-threads 2]
//                  [--log FILE]   (hand-off + write + fdatasync per batch)
//
// Not a server for anything but this measurement: no revisions, no auth,
// no limits. Runs until SIGINT/SIGTERM.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"

namespace {

using etcdserverpb::PutRequest;
using etcdserverpb::PutResponse;
using etcdserverpb::RangeRequest;
using etcdserverpb::RangeResponse;

std::mutex g_map_mu;
std::map<std::string, std::string> g_map;
int64_t g_revision = 1;

int64_t do_put(const PutRequest& req, PutResponse* resp) {
  std::lock_guard<std::mutex> lock(g_map_mu);
  g_map[req.key()] = req.value();
  resp->mutable_header()->set_revision(++g_revision);
  return g_revision;
}

void do_range(const RangeRequest& req, RangeResponse* resp) {
  std::lock_guard<std::mutex> lock(g_map_mu);
  auto it = g_map.find(req.key());
  if (it != g_map.end()) {
    auto* kv = resp->add_kvs();
    kv->set_key(it->first);
    kv->set_value(it->second);
  }
  resp->set_count(resp->kvs_size());
  resp->mutable_header()->set_revision(g_revision);
}

// The member's path for a write: one thread takes every queued put, writes
// them to the log file, fdatasyncs once, then answers each (Raft's group
// commit and apply, without Raft).
class LogThread {
 public:
  explicit LogThread(const std::string& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd_ < 0) {
      std::perror("open --log");
      std::exit(2);
    }
    thread_ = std::thread([this] { run(); });
  }
  void post(std::string record, std::function<void()> answer) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back(std::move(record), std::move(answer));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    std::vector<std::pair<std::string, std::function<void()>>> batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
        queue_.clear();
      }
      std::string buf;
      for (auto& [r, _] : batch) buf += r;
      if (::write(fd_, buf.data(), buf.size()) < 0 || ::fdatasync(fd_) != 0) {
        std::perror("log write");
        std::exit(2);
      }
      for (auto& [_, answer] : batch) answer();
      batch.clear();
    }
  }
  int fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::function<void()>>> queue_;
  std::thread thread_;
};

LogThread* g_log = nullptr;

// ---- callback API (as etcdq's services) ------------------------------------
class CallbackKV final : public etcdserverpb::KV::CallbackService {
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* c, const PutRequest* req, PutResponse* resp) override {
    auto* r = c->DefaultReactor();
    if (g_log == nullptr) {
      do_put(*req, resp);
      r->Finish(grpc::Status::OK);
    } else {
      g_log->post(req->key() + req->value(), [req, resp, r] {
        do_put(*req, resp);
        r->Finish(grpc::Status::OK);
      });
    }
    return r;
  }
  grpc::ServerUnaryReactor* Range(grpc::CallbackServerContext* c, const RangeRequest* req,
                                  RangeResponse* resp) override {
    auto* r = c->DefaultReactor();
    do_range(*req, resp);
    r->Finish(grpc::Status::OK);
    return r;
  }
};

// ---- completion queue API, threads of our own ------------------------------
struct Call {
  virtual ~Call() = default;
  // ok: the event's outcome. Returns false once the call is done.
  virtual bool proceed(bool ok) = 0;
};

template <typename Req, typename Resp>
struct UnaryCall : Call {
  using RequestFn = void (etcdserverpb::KV::AsyncService::*)(grpc::ServerContext*, Req*,
                                                             grpc::ServerAsyncResponseWriter<Resp>*,
                                                             grpc::CompletionQueue*, grpc::ServerCompletionQueue*,
                                                             void*);
  UnaryCall(etcdserverpb::KV::AsyncService* s, grpc::ServerCompletionQueue* cq, RequestFn fn)
      : svc(s), cq(cq), request(fn), rw(&ctx) {
    (svc->*request)(&ctx, &req, &rw, cq, cq, this);
  }
  bool proceed(bool ok) override {
    if (finishing || !ok) return false;
    new UnaryCall(svc, cq, request);  // the next call of this method on this queue
    finishing = true;
    handle();
    return true;
  }
  void handle();
  etcdserverpb::KV::AsyncService* svc;
  grpc::ServerCompletionQueue* cq;
  RequestFn request;
  grpc::ServerContext ctx;
  Req req;
  Resp resp;
  grpc::ServerAsyncResponseWriter<Resp> rw;
  bool finishing = false;
};

template <>
void UnaryCall<PutRequest, PutResponse>::handle() {
  if (g_log == nullptr) {
    do_put(req, &resp);
    rw.Finish(resp, grpc::Status::OK, this);
  } else {
    g_log->post(req.key() + req.value(), [this] {
      do_put(req, &resp);
      rw.Finish(resp, grpc::Status::OK, this);
    });
  }
}

template <>
void UnaryCall<RangeRequest, RangeResponse>::handle() {
  do_range(req, &resp);
  rw.Finish(resp, grpc::Status::OK, this);
}

std::atomic<bool> g_stop{false};

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts, so that every thread blocks them: sigwait below takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::string listen = "127.0.0.1:23790", api = "callback", log;
  int cq_threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--listen") listen = argv[i + 1];
    else if (a == "--api") api = argv[i + 1];
    else if (a == "--cq-threads") cq_threads = std::atoi(argv[i + 1]);
    else if (a == "--log") log = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: grpc_api_probe --listen HOST:PORT --api callback|cq [--cq-threads N] [--log FILE]\n");
      return 2;
    }
  }
  if (!log.empty()) g_log = new LogThread(log);
  grpc::ServerBuilder b;
  b.AddListeningPort(listen, grpc::InsecureServerCredentials());
  CallbackKV cb;
  etcdserverpb::KV::AsyncService as;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs;
  if (api == "callback") {
    b.RegisterService(&cb);
  } else if (api == "cq") {
    b.RegisterService(&as);
    for (int i = 0; i < cq_threads; ++i) cqs.push_back(b.AddCompletionQueue());
  } else {
    std::fprintf(stderr, "--api callback|cq\n");
    return 2;
  }
  auto server = b.BuildAndStart();
  if (!server) return 1;
  std::vector<std::thread> threads;
  for (auto& cq : cqs) {
    grpc::ServerCompletionQueue* q = cq.get();
    // A few calls requested ahead on each queue, per method.
    for (int k = 0; k < 8; ++k) {
      new UnaryCall<PutRequest, PutResponse>(&as, q, &etcdserverpb::KV::AsyncService::RequestPut);
      new UnaryCall<RangeRequest, RangeResponse>(&as, q, &etcdserverpb::KV::AsyncService::RequestRange);
    }
    threads.emplace_back([q] {
      void* tag;
      bool ok;
      while (q->Next(&tag, &ok)) {
        auto* c = static_cast<Call*>(tag);
        if (!c->proceed(ok)) delete c;
      }
    });
  }
  std::fprintf(stderr, "grpc_api_probe: %s API on %s%s\n", api.c_str(), listen.c_str(),
               g_log ? " (log thread + fdatasync)" : "");
  int sig = 0;
  sigwait(&set, &sig);
  std::_Exit(0);  // a probe: no orderly drain needed
}
