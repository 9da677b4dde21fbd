// A workload of etcdq_loadgen: what one request is and how its answer is
// checked. The runner (runner.h) drives `clients` closed loops over it.
//
// Thread-safety: issue() is called concurrently from many gRPC callback
// threads (never twice at once for the same client); prepare() and finish()
// run on the main thread with nothing in flight.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "loadgen/options.h"

namespace loadgen {

// What one request came to. `op` indexes Workload::op_names(); `error` is
// empty on success, else a short reason: the gRPC status message, or
// "check: ..." when the server answered OK with the wrong thing.
struct Outcome {
  int op = 0;
  std::string error;
};
using Done = std::function<void(Outcome)>;

// One unary call in flight: the context, request and response live until the
// callback has run. Every call gives up after kCallDeadline.
inline constexpr auto kCallDeadline = std::chrono::seconds(30);
template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
  Call() { ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline); }
};

// The channels and stubs a workload uses; stub i belongs to channel i.
struct Connections {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> kv;
  std::vector<std::unique_ptr<etcdserverpb::Lease::Stub>> lease;
  std::vector<std::unique_ptr<etcdserverpb::Watch::Stub>> watch;
  // The stub client `c` talks through (clients spread over channels).
  size_t of_client(int c) const { return static_cast<size_t>(c) % kv.size(); }
};

class Workload {
 public:
  virtual ~Workload() = default;
  // Names of the operations it records separately (e.g. {"put"}).
  virtual std::vector<std::string> op_names() const = 0;
  // Before the timed run: load keys, grant leases, open streams.
  // False (with *error) aborts the workload.
  virtual bool prepare(std::string* /*error*/) { return true; }
  // Upper bound on requests (e.g. delete: keys loaded); -1 for none.
  virtual int64_t max_requests() const { return -1; }
  // Starts request `seq` (0, 1, ... across all clients) for `client`; calls
  // `done` exactly once, from any thread.
  virtual void issue(int client, int64_t seq, Done done) = 0;
  // After the run: close streams, drain watchers, run end-of-run checks.
  // Adds named counts to *checks (printed and in the JSON) and returns the
  // number of violations found (wrong answers not tied to one request).
  virtual int64_t finish(std::map<std::string, int64_t>* /*checks*/) { return 0; }
};

// The workload named `name` (options.h lists them), over `conns`.
std::unique_ptr<Workload> make_workload(const std::string& name, const Options& o, Connections* conns);

// Helpers the KV workloads share.
// Key number i as a zero-padded decimal of `width` digits after `prefix`.
std::string numbered_key(const std::string& prefix, int64_t i, int width);
// 64-bit mixer (splitmix64 finaliser): random keys from request numbers.
uint64_t mix64(uint64_t x);
// Puts keys numbered_key(prefix, i, width) for i in [first, end) with
// `value`, in Txns of 100 puts, 32 in flight; false with *error on the
// first failure.
bool load_keys(Connections* conns, const std::string& prefix, int64_t first, int64_t end, int width,
               const std::string& value, std::string* error);

}  // namespace loadgen
