#include "net/tls_listener.h"

namespace etcdq::net {

TlsListener::TlsListener(std::shared_ptr<TlsContext> context, TlsPump::Routes routes, std::string role)
    : pump_(std::make_unique<TlsPump>(std::move(context), std::move(routes), role)) {
  Mux::Routes mr;
  TlsPump* pump = pump_.get();
  mr.prefixed.push_back({std::string(TlsPump::kTlsMagic), [pump](int fd) { pump->adopt(fd); }});
  mr.http1 = [role](int fd) { TlsPump::reject_plaintext(fd, role); };
  mr.http2 = mr.http1;
  mux_ = std::make_unique<Mux>(std::move(mr), role);
}

TlsListener::~TlsListener() { stop(); }

Error TlsListener::listen(const std::vector<std::pair<std::string, int>>& addresses) { return mux_->listen(addresses); }

Error TlsListener::start() {
  if (Error e = pump_->start()) return e;
  return mux_->start();
}

void TlsListener::stop_accepting() {
  mux_->stop();
  pump_->stop_routing();
}

void TlsListener::stop() {
  mux_->stop();  // first: no more connections for the pump
  pump_->stop();
}

}  // namespace etcdq::net
