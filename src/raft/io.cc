#include "raft/io.h"

#include "raft/transport.h"

namespace etcdq::raft {

Error UvIo::open(const std::string& dir) {
  if (int rv = raft_uv_init(&io_, loop_, dir.c_str(), transport_); rv != 0) {
    std::string msg = io_.errmsg;
    // raft_uv_init frees what it made when it fails.
    return errors::internal("cannot open the Raft log in " + dir + ": " + msg);
  }
  raft_uv_set_connect_retry_delay(&io_, kConnectRetryDelayMs);
  opened_ = true;
  return {};
}

void UvIo::close() {
  if (!opened_) return;
  opened_ = false;
  raft_uv_close(&io_);
}

namespace {

class GrpcUvIo final : public RaftIo {
 public:
  GrpcUvIo(uv_loop_t* loop, std::shared_ptr<Forwarder> forwarder)
      : transport_(loop, [fw = std::move(forwarder)](const std::string& target) { return fw->channel(target); }),
        uv_(loop, transport_.raw()) {}
  Error open(const std::string& dir) override { return uv_.open(dir); }
  struct raft_io* get() override { return uv_.get(); }
  void close() override { uv_.close(); }
  grpc::Service* service() override { return transport_.service(); }

 private:
  GrpcTransport transport_;
  UvIo uv_;
};

}  // namespace

std::unique_ptr<RaftIo> grpc_uv_io(uv_loop_t* loop, std::shared_ptr<Forwarder> forwarder) {
  return std::make_unique<GrpcUvIo>(loop, std::move(forwarder));
}

}  // namespace etcdq::raft
