// The https:// listeners of one role (client URLs, --listen-client-http-urls,
// --listen-metrics-urls): a net::Mux whose only route of substance is
// TLS (a connection opening with a TLS record goes to a net::TlsPump, which
// routes the plaintext as a plain Mux would). Anything else (plain HTTP,
// an insecure gRPC client) is closed, as etcd 3.4 closes it.
//
// Thread-safety: listen(), start(), stop_accepting(), stop() from one
// thread, in that order.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "net/mux.h"
#include "net/tls_pump.h"

namespace etcdq::net {

class TlsListener {
 public:
  TlsListener(std::shared_ptr<TlsContext> context, TlsPump::Routes routes, std::string role = "client");
  ~TlsListener();  // stop()

  // As Mux::listen: errors name the address.
  Error listen(const std::vector<std::pair<std::string, int>>& addresses);
  Error start();
  // Closes the listeners and hands no more connections to the routes
  // (their servers may stop after this returns); the routed ones go on, so
  // their servers can end them (gRPC's GOAWAY, a watch's Unavailable).
  void stop_accepting();
  // stop_accepting(), then closes every connection and joins the pump.
  void stop();
  const TlsPump& pump() const { return *pump_; }

 private:
  std::unique_ptr<TlsPump> pump_;
  std::unique_ptr<Mux> mux_;
};

}  // namespace etcdq::net
