#include "http/server.h"

#include <httplib.h>

namespace etcdq::http {

HttpServer::HttpServer(HttpOptions opts) : opts_(std::move(opts)) {}

HttpServer::~HttpServer() { stop(); }

Error HttpServer::start(const std::vector<std::pair<std::string, int>>& listen) {
  for (const auto& [host, port] : listen) {
    auto s = std::make_unique<httplib::Server>();
    s->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(opts_.metrics(), "text/plain; version=0.0.4");
    });
    s->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      bool ok = opts_.has_leader();
      res.status = ok ? 200 : 503;
      res.set_content(ok ? "{\"health\":\"true\",\"reason\":\"\"}" : "{\"health\":\"false\",\"reason\":\"no leader\"}",
                      "application/json");
    });
    s->Get("/version", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"etcdserver\":\"" + opts_.server_version + "\",\"etcdcluster\":\"" + opts_.cluster_version +
                          "\"}",
                      "application/json");
    });
    if (!s->bind_to_port(host, port)) {
      stop();
      return {Code::kUnavailable, "cannot listen for HTTP on " + host + ":" + std::to_string(port)};
    }
    auto* raw = s.get();
    servers_.push_back(std::move(s));
    threads_.emplace_back([raw] { raw->listen_after_bind(); });
  }
  return {};
}

void HttpServer::stop() {
  for (auto& s : servers_) s->stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  servers_.clear();
}

}  // namespace etcdq::http
