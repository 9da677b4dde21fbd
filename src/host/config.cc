#include "host/config.h"

namespace etcdq::host {

bool Config::client_tls_wanted() const {
  for (const auto* urls : {&listen_client_urls, &listen_client_http_urls, &listen_metrics_urls}) {
    for (const auto& u : *urls) {
      if (u.scheme == "https") return true;
    }
  }
  return false;
}

bool Config::peer_tls_wanted() const {
  for (const auto& u : listen_peer_urls) {
    if (u.scheme == "https") return true;
  }
  return false;
}

}  // namespace etcdq::host
