#include "queue/ctl.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <httplib.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "queue/config.h"
#include "queue/keys.h"

namespace etcdq::queue {
namespace {

struct CtlFlags {
  std::string endpoints = "127.0.0.1:2379";
  std::string cacert, cert, key;
  std::string user, password;
  bool insecure_skip_verify = false;
  double dial_timeout_s = 2;
  double command_timeout_s = 5;
  std::string http_endpoint;  // stat: where the member serves HTTP, if not on the gRPC endpoint
};

// A failure the user sees: one line, exit 1.
struct CtlError {
  std::string message;
};

bool read_file_to(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

std::string pem_of(const std::string& path, const char* flag) {
  std::string pem;
  if (!read_file_to(path, &pem)) throw CtlError{std::string("cannot read ") + flag + " " + path};
  return pem;
}

// etcdctl's transport: https:// (or any TLS flag) means TLS, as
// clientv3's; --insecure-skip-tls-verify accepts any server certificate.
bool ctl_uses_tls(const CtlFlags& f, bool https) {
  return https || !f.cacert.empty() || !f.cert.empty() || f.insecure_skip_verify;
}

std::shared_ptr<grpc::ChannelCredentials> credentials_for(const CtlFlags& f, bool https) {
  if (!ctl_uses_tls(f, https)) return grpc::InsecureChannelCredentials();
  if (f.cert.empty() != f.key.empty()) throw CtlError{"--cert and --key go together"};
  std::string root = f.cacert.empty() ? "" : pem_of(f.cacert, "--cacert");
  std::string cert = f.cert.empty() ? "" : pem_of(f.cert, "--cert");
  std::string key = f.key.empty() ? "" : pem_of(f.key, "--key");
  if (!f.insecure_skip_verify) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = root;
    o.pem_cert_chain = cert;
    o.pem_private_key = key;
    return grpc::SslCredentials(o);
  }
  grpc::experimental::TlsChannelCredentialsOptions o;
  std::vector<grpc::experimental::IdentityKeyCertPair> pairs;
  if (!cert.empty()) pairs.push_back({key, cert});
  if (!root.empty() || !pairs.empty()) {
    o.set_certificate_provider(std::make_shared<grpc::experimental::StaticDataCertificateProvider>(root, pairs));
    if (!root.empty()) o.watch_root_certs();
    if (!pairs.empty()) o.watch_identity_key_cert_pairs();
  }
  o.set_verify_server_certs(false);
  o.set_check_call_host(false);
  o.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  return grpc::experimental::TlsCredentials(o);
}

std::chrono::system_clock::time_point ctl_deadline(double s) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

class CtlClient {
 public:
  explicit CtlClient(const CtlFlags& f) : flags_(f) {
    std::vector<std::string> tried;
    std::stringstream list(f.endpoints);
    std::string ep;
    while (std::getline(list, ep, ',')) {
      if (ep.empty()) continue;
      bool https = ep.starts_with("https://");
      std::string target = ep;
      if (https) target = ep.substr(8);
      if (target.starts_with("http://")) target = target.substr(7);
      if (target.starts_with("unix://") || target.starts_with("unixs://")) target = "unix:" + target.substr(target.find("//") + 2);
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);
      auto ch = grpc::CreateCustomChannel(target, credentials_for(f, https), args);
      if (ch->WaitForConnected(ctl_deadline(f.dial_timeout_s))) {
        channel_ = ch;
        endpoint_ = ep;
        break;
      }
      tried.push_back(ep);
    }
    if (!channel_) {
      std::string names;
      for (const auto& t : tried) names += (names.empty() ? "" : ", ") + t;
      bool tls = !f.cacert.empty() || !f.cert.empty() || f.insecure_skip_verify || f.endpoints.find("https://") != std::string::npos;
      throw CtlError{"cannot connect to " + (names.empty() ? std::string("any endpoint") : names) +
                     " within --dial-timeout" +
                     (tls ? " (TLS: does the server want a client certificate, --cert/--key, and does --cacert "
                            "sign its certificate?)"
                          : "")};
    }
    kv_ = etcdserverpb::KV::NewStub(channel_);
    if (!f.user.empty()) authenticate();
  }

  etcdserverpb::RangeResponse range(const etcdserverpb::RangeRequest& r) {
    etcdserverpb::RangeResponse out;
    auto ctx = context();
    check(kv_->Range(ctx.get(), r, &out), "range");
    return out;
  }
  etcdserverpb::DeleteRangeResponse del(const etcdserverpb::DeleteRangeRequest& r) {
    etcdserverpb::DeleteRangeResponse out;
    auto ctx = context();
    check(kv_->DeleteRange(ctx.get(), r, &out), "delete");
    return out;
  }
  // The endpoint the channel went to, as the user wrote it, and the token
  // --user got (empty without): the HTTP side asks the same member.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& token() const { return token_; }
  etcdserverpb::TxnResponse txn(const etcdserverpb::TxnRequest& r) {
    etcdserverpb::TxnResponse out;
    auto ctx = context();
    check(kv_->Txn(ctx.get(), r, &out), "txn");
    return out;
  }

 private:
  // --user NAME[:PASSWORD], as etcdctl; --password wins.
  void authenticate() {
    std::string name = flags_.user, password = flags_.password;
    if (auto colon = name.find(':'); colon != std::string::npos) {
      if (password.empty()) password = name.substr(colon + 1);
      name = name.substr(0, colon);
    }
    auto auth = etcdserverpb::Auth::NewStub(channel_);
    etcdserverpb::AuthenticateRequest req;
    req.set_name(name);
    req.set_password(password);
    etcdserverpb::AuthenticateResponse resp;
    auto ctx = context();
    check(auth->Authenticate(ctx.get(), req, &resp), "authenticate");
    token_ = resp.token();
  }
  std::unique_ptr<grpc::ClientContext> context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(ctl_deadline(flags_.command_timeout_s));
    if (!token_.empty()) ctx->AddMetadata("token", token_);
    return ctx;
  }
  static void check(const grpc::Status& s, const char* what) {
    if (!s.ok()) throw CtlError{std::string(what) + ": " + s.error_message()};
  }

  CtlFlags flags_;
  std::shared_ptr<grpc::Channel> channel_;
  std::string endpoint_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::string token_;
};

// ---- the member's /queues.json (page.h): what the KV API has no key for --

// One answer of GET /queues.json/NAME.
struct CtlLive {
  std::string member;     // the member's id, hex
  int64_t time_ms = 0;    // the member's clock, Unix ms
  nlohmann::json queue;   // the queue's entry; null: not listed
};

// Every byte outside RFC 3986's unreserved set as %XX, so any queue name
// is one path segment (the server decodes it).
std::string ctl_path_segment(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    bool plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                 ch == '.' || ch == '_' || ch == '~';
    if (plain) {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

// httplib's error names ("Read") say little to a user.
std::string ctl_http_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "no connection within --dial-timeout";
    case httplib::Error::Read:
      return "no HTTP answer (a member with --listen-client-http-urls serves none on its client URL: "
             "--http-endpoint) or none within --command-timeout";
    case httplib::Error::Write:
      return "cannot send the request";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load --cacert, --cert or --key";
    case httplib::Error::SSLServerVerification:
      return "server certificate not verified (--cacert?)";
    default:
      return httplib::to_string(e);
  }
}

// An HTTP/1.1 client of the member the gRPC channel went to, on the same
// port (etcd serves HTTP on its client URL), with the same TLS settings
// and the token --user got (the Authorization header, as the page reads
// it); or of --http-endpoint, whose http:// or https:// decides TLS (a
// --listen-client-http-urls URL is often plain beside a TLS client URL).
// Errors: CtlError.
class CtlHttp {
 public:
  CtlHttp(const CtlFlags& f, const std::string& endpoint, bool scheme_decides, std::string token)
      : token_(std::move(token)) {
    std::string ep = endpoint;
    if (ep.starts_with("unix:") || ep.starts_with("unixs:")) throw CtlError{"not fetched over a unix socket"};
    bool https = ep.starts_with("https://");
    bool http = !https && ep.starts_with("http://");
    if (https) {
      ep = ep.substr(8);
    } else if (http) {
      ep = ep.substr(7);
    }
    ep = ep.substr(0, ep.find('/'));
    std::string host, port;
    if (ep.starts_with('[')) {  // [v6]:port
      size_t close = ep.find(']');
      if (close != std::string::npos) {
        host = ep.substr(1, close - 1);
        if (ep.compare(close + 1, 1, ":") == 0) port = ep.substr(close + 2);
      }
    } else if (size_t colon = ep.rfind(':'); colon != std::string::npos) {
      host = ep.substr(0, colon);
      port = ep.substr(colon + 1);
    }
    int port_number = 0;
    bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    if (digits) port_number = std::stoi(port);
    if (host.empty() || port_number < 1 || port_number > 65535) {
      throw CtlError{"no host:port in endpoint " + endpoint};
    }
    tls_ = (scheme_decides && http) ? false : ctl_uses_tls(f, https);
    base_ = std::string(tls_ ? "https://" : "http://") + ep;
    if (tls_) {
      // Empty paths: no client certificate, the system's CAs.
      auto ssl = std::make_unique<httplib::SSLClient>(host, port_number, f.cert, f.key);
      if (!f.cacert.empty()) ssl->set_ca_cert_path(f.cacert);
      ssl->enable_server_certificate_verification(!f.insecure_skip_verify);
      client_ = std::move(ssl);
    } else {
      client_ = std::make_unique<httplib::ClientImpl>(host, port_number);
    }
    auto split = [](double s, time_t* sec, time_t* usec) {
      auto us = static_cast<int64_t>(s * 1e6);
      *sec = static_cast<time_t>(us / 1000000);
      *usec = static_cast<time_t>(us % 1000000);
    };
    time_t sec = 0, usec = 0;
    split(f.dial_timeout_s, &sec, &usec);
    client_->set_connection_timeout(sec, usec);
    split(f.command_timeout_s, &sec, &usec);
    dial_timeout_s_ = f.dial_timeout_s;
    command_timeout_s_ = f.command_timeout_s;
    client_->set_read_timeout(sec, usec);
    client_->set_write_timeout(sec, usec);
    client_->set_url_encode(false);  // ctl_path_segment did
  }

  std::string url(const std::string& queue) const { return base_ + path(queue); }

  CtlLive get(const std::string& queue) {
    httplib::Headers headers;
    if (!token_.empty()) headers.emplace("Authorization", token_);
    // One queue's entry is small; 1 MiB bounds what a wrong server can
    // make us hold (decompressed, as the receiver sees it).
    constexpr size_t kMaxBody = 1 << 20;
    std::string body;
    bool too_big = false;
    // httplib's timeouts are for each read: a server that drips a byte of
    // headers, chunks or body every second would hold stat forever (and
    // its headers, which httplib 0.11 does not bound, grow meanwhile). A
    // watchdog stops the request once --dial-timeout plus
    // --command-timeout have passed; ClientImpl::stop() only shuts the
    // socket down while a request runs, which is safe from another thread.
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>((dial_timeout_s_ + command_timeout_s_) * 1e6));
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false, stopped = false;
    std::thread watchdog([&] {
      std::unique_lock lock(mu);
      if (!cv.wait_until(lock, deadline, [&] { return finished; })) {
        stopped = true;
        client_->stop();
      }
    });
    auto res = client_->Get(path(queue), headers, [&](const char* data, size_t n) {
      if (body.size() + n > kMaxBody) {
        too_big = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    {
      std::lock_guard lock(mu);
      finished = true;
    }
    cv.notify_one();
    watchdog.join();
    if (too_big) throw CtlError{"answer over 1 MiB"};
    if (stopped) throw CtlError{"no whole answer within --dial-timeout plus --command-timeout"};
    if (!res) throw CtlError{ctl_http_error(res.error())};
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (res->status != 200) {
      std::string why = "HTTP " + std::to_string(res->status);
      if (j.is_object() && j.contains("error") && j["error"].is_string()) why += ": " + j["error"].get<std::string>();
      if (res->status == 401 && token_.empty()) why += " (auth is on: --user)";
      if (res->status == 404) why += " (not an etcdq member, or its client URL serves no HTTP)";
      throw CtlError{why};
    }
    if (!j.is_object() || !j.contains("queues") || !j["queues"].is_array() || !j.contains("time_ms") ||
        !j["time_ms"].is_number_integer() || !j.contains("member") || !j["member"].is_string()) {
      throw CtlError{"not the JSON of an etcdq member's /queues.json"};
    }
    CtlLive out;
    out.member = j["member"].get<std::string>();
    out.time_ms = j["time_ms"].get<int64_t>();
    const std::string listed = metrics::label_value(queue);  // the name as the page writes it
    for (auto& q : j["queues"]) {
      auto n = q.is_object() ? q.find("name") : q.end();
      if (n != q.end() && n->is_string() && n->get<std::string>() == listed) out.queue = std::move(q);
    }
    return out;
  }

 private:
  static std::string path(const std::string& queue) { return "/queues.json/" + ctl_path_segment(queue); }

  std::string token_;
  double dial_timeout_s_ = 0, command_timeout_s_ = 0;
  bool tls_ = false;
  std::string base_;
  std::unique_ptr<httplib::ClientImpl> client_;
};

// A number of an entry, 0 when missing or not a number (a server older or
// newer than this client).
double ctl_field(const nlohmann::json& q, const char* name) {
  auto it = q.find(name);
  return it != q.end() && it->is_number() ? it->get<double>() : 0;
}

// stat's figures from the page: in flight, consumers, oldest age, rates
// over `interval_s` (two reads; 0: one read, no rates), counters. One line
// when the HTTP side cannot say; never an error (the key figures stand).
void ctl_print_live(const CtlFlags& f, const CtlClient& c, const std::string& name, double interval_s) {
  const char* kWhat = "in flight, consumers, rates, oldest age:";
  std::string url = c.endpoint();
  try {
    bool own = !f.http_endpoint.empty();
    CtlHttp http(f, own ? f.http_endpoint : c.endpoint(), own, c.token());
    url = http.url(name);
    CtlLive first = http.get(name);
    if (first.queue.is_null()) {
      std::printf("%s none (member %s lists nothing for %s: it holds no messages, consumers or config of it, or "
                  "the user may not read all of /q/%s/)\n",
                  kWhat, first.member.c_str(), name.c_str(), name.c_str());
      return;
    }
    CtlLive last = first;
    if (interval_s > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000)));
      last = http.get(name);
      if (last.queue.is_null()) last = first;  // emptied and dropped meanwhile: no rates
    }
    const auto& q = last.queue;
    std::printf("in flight:     %.0f\n", ctl_field(q, "in_flight"));
    std::printf("consumers:     %.0f on member %s (each member counts those connected to it)\n",
                ctl_field(q, "consumers"), last.member.c_str());
    std::printf("oldest age:    %.1f s\n", ctl_field(q, "oldest_age_seconds"));
    if (last.time_ms > first.time_ms) {
      double dt = (last.time_ms - first.time_ms) / 1000.0;
      auto rate = [&](const char* field) {
        return (ctl_field(last.queue, field) - ctl_field(first.queue, field)) / dt;
      };
      std::printf("rates:         produced %.1f/s, delivered %.1f/s, acked %.1f/s (over %.1f s)\n", rate("produced"),
                  rate("delivered"), rate("acked"), dt);
    }
    std::printf("totals:        produced %.0f, delivered %.0f, redelivered %.0f, acked %.0f, dead-lettered %.0f\n",
                ctl_field(q, "produced"), ctl_field(q, "delivered"), ctl_field(q, "redelivered"),
                ctl_field(q, "acked"), ctl_field(q, "dead_lettered"));
  } catch (const CtlError& e) {
    std::printf("%s unknown (GET %s: %s)\n", kWhat, url.c_str(), e.message.c_str());
  }
}

// A queue name the user gave: one non-empty path segment (keys.h).
void ctl_check_name(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) {
    throw CtlError{"queue name \"" + name + "\": one non-empty path segment (no '/')"};
  }
}

etcdserverpb::RangeRequest ctl_messages_of(const std::string& queue) {
  etcdserverpb::RangeRequest r;
  r.set_key(messages_begin(queue, 0));
  r.set_range_end(messages_end(queue));
  return r;
}

int64_t ctl_depth_of(CtlClient& c, const std::string& queue) {
  auto r = ctl_messages_of(queue);
  r.set_count_only(true);
  return c.range(r).count();
}

// "1 message", "3 messages".
std::string ctl_messages(int64_t n) { return std::to_string(n) + (n == 1 ? " message" : " messages"); }

int cmd_ls(CtlClient& c) {
  // One keys-only Range of one key a queue: from each queue's first key
  // the scan jumps past the queue's whole prefix.
  std::vector<std::pair<std::string, int64_t>> rows;
  std::string from = "/q/";
  const std::string end = "/q0";
  for (;;) {
    etcdserverpb::RangeRequest r;
    r.set_key(from);
    r.set_range_end(end);
    r.set_limit(1);
    r.set_keys_only(true);
    auto resp = c.range(r);
    if (resp.kvs_size() == 0) break;
    std::string_view rest = std::string_view(resp.kvs(0).key()).substr(3);
    std::string name(rest.substr(0, rest.find('/')));
    if (name.empty()) {  // "/q//...": no queue's; step over it
      from = "/q/0";
      continue;
    }
    rows.emplace_back(name, ctl_depth_of(c, name));
    from = "/q/" + name + "0";  // '0' follows '/'
  }
  size_t width = 5;
  for (const auto& [n, d] : rows) width = std::max(width, n.size());
  std::printf("%-*s  %s\n", static_cast<int>(width), "QUEUE", "DEPTH");
  for (const auto& [n, d] : rows) std::printf("%-*s  %lld\n", static_cast<int>(width), n.c_str(), static_cast<long long>(d));
  return 0;
}

int cmd_stat(const CtlFlags& f, CtlClient& c, const std::string& name, double interval_s) {
  ctl_check_name(name);
  int64_t depth = ctl_depth_of(c, name);
  std::printf("queue:         %s\n", name.c_str());
  std::printf("depth:         %lld\n", static_cast<long long>(depth));
  for (bool newest : {false, true}) {
    auto r = ctl_messages_of(name);
    r.set_limit(1);
    r.set_keys_only(true);
    if (newest) {
      r.set_sort_order(etcdserverpb::RangeRequest::DESCEND);
      r.set_sort_target(etcdserverpb::RangeRequest::KEY);
    }
    auto resp = c.range(r);
    if (resp.kvs_size() == 0) continue;
    Key k = parse(resp.kvs(0).key());
    std::printf("%s        idx %llu (%s)\n", newest ? "newest:" : "oldest:", static_cast<unsigned long long>(k.idx),
                resp.kvs(0).key().c_str());
  }
  std::string dlq = dead_letter_queue(name);
  try {
    std::printf("dead letters:  %lld (queue %s)\n", static_cast<long long>(ctl_depth_of(c, dlq)), dlq.c_str());
  } catch (const CtlError& e) {  // e.g. a user who may read the queue but not its dead letters
    std::printf("dead letters:  unknown (queue %s: %s)\n", dlq.c_str(), e.message.c_str());
  }
  etcdserverpb::RangeRequest r;
  r.set_key(config_key(name));
  auto resp = c.range(r);
  Config cfg;
  std::string source = "defaults";
  if (resp.kvs_size() == 1) {
    if (Error e = parse_config(resp.kvs(0).value(), &cfg)) {
      source = "config not valid (" + e.message() + "), defaults";
    } else {
      source = "config " + resp.kvs(0).value();
    }
  }
  std::printf("settings:      visibility_timeout %.3g s, max_deliveries %u, max_in_flight %u (%s)\n",
              cfg.visibility_ms / 1000.0, cfg.max_deliveries, cfg.max_in_flight, source.c_str());
  ctl_print_live(f, c, name, interval_s);
  return 0;
}

int cmd_peek(CtlClient& c, const std::string& name, int64_t n) {
  ctl_check_name(name);
  if (n < 1) throw CtlError{"peek: N must be at least 1"};
  auto r = ctl_messages_of(name);
  r.set_limit(n);
  auto resp = c.range(r);
  for (const auto& kv : resp.kvs()) {
    Key k = parse(kv.key());
    std::printf("idx %llu  tail %.*s  (%s)\n", static_cast<unsigned long long>(k.idx), static_cast<int>(k.tail.size()),
                k.tail.data(), kv.key().c_str());
    std::fwrite(kv.value().data(), 1, kv.value().size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

int cmd_redrive(CtlClient& c, const std::string& dlq) {
  ctl_check_name(dlq);
  const std::string suffix = ".dlq";
  if (dlq.size() <= suffix.size() || !dlq.ends_with(suffix)) {
    throw CtlError{"redrive: name a dead-letter queue (NAME.dlq), got \"" + dlq + "\""};
  }
  const std::string queue = dlq.substr(0, dlq.size() - suffix.size());
  int64_t moved = 0, skipped = 0;
  std::string from = messages_begin(dlq, 0);
  for (;;) {
    etcdserverpb::RangeRequest r = ctl_messages_of(dlq);
    r.set_key(from);
    r.set_limit(64);
    auto resp = c.range(r);
    if (resp.kvs_size() == 0) break;
    for (const auto& kv : resp.kvs()) {
      // A dead letter's value: a JSON line about it, then the payload
      // exactly as produced (README, "Work queues").
      const std::string& v = kv.value();
      size_t nl = v.find('\n');
      auto meta = nlohmann::json::parse(v.substr(0, nl == std::string::npos ? v.size() : nl), nullptr, false);
      if (nl == std::string::npos || meta.is_discarded() || !meta.is_object()) {
        std::fprintf(stderr, "etcdq queue: %s is not a dead letter (no JSON line); left as it is\n", kv.key().c_str());
        ++skipped;
        continue;
      }
      std::string tail = "redriven";
      if (auto it = meta.find("key"); it != meta.end() && it->is_string()) {
        std::string original = it->get<std::string>();
        Key k = parse(original);
        if (k.kind == KeyKind::kMessage && !k.tail.empty()) tail = std::string(k.tail);
      }
      etcdserverpb::TxnRequest t;
      auto* cmp = t.add_compare();
      cmp->set_key(kv.key());
      cmp->set_target(etcdserverpb::Compare::MOD);
      cmp->set_result(etcdserverpb::Compare::EQUAL);
      cmp->set_mod_revision(kv.mod_revision());
      auto* put = t.add_success()->mutable_request_put();
      put->set_key("/q/" + queue + "/p/" + tail);
      put->set_value(v.substr(nl + 1));
      t.add_success()->mutable_request_delete_range()->set_key(kv.key());
      if (c.txn(t).succeeded()) {
        ++moved;
      } else {
        ++skipped;  // acked or redriven by someone else meanwhile
      }
    }
    from = resp.kvs(resp.kvs_size() - 1).key() + '\0';
    if (!resp.more()) break;
  }
  std::printf("redrove %s from %s to %s", ctl_messages(moved).c_str(), dlq.c_str(), queue.c_str());
  if (skipped > 0) std::printf(" (%lld left or gone meanwhile)", static_cast<long long>(skipped));
  std::printf("\n");
  return 0;
}

int cmd_purge(CtlClient& c, const std::string& name) {
  ctl_check_name(name);
  etcdserverpb::DeleteRangeRequest d;
  d.set_key(messages_begin(name, 0));
  d.set_range_end(messages_end(name));
  auto resp = c.del(d);
  std::printf("purged %s from %s\n", ctl_messages(resp.deleted()).c_str(), name.c_str());
  return 0;
}

}  // namespace

int ctl_main(int argc, char** argv) {
  // gRPC's own log lines (TLS handshake failures, retries) would come before
  // our one line; the user's environment wins.
  setenv("GRPC_VERBOSITY", "NONE", 0);
  CLI::App app{"etcdq queue: see and steer the work queues of an etcdq cluster (etcd v3 API)", "etcdq queue"};
  CtlFlags f;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // the last one wins, as etcdctl
  // etcdctl's environment variables too (the flag wins, as etcdctl's); not
  // its DIAL/COMMAND_TIMEOUT, which are Go durations where ours are seconds.
  app.add_option("--endpoints", f.endpoints, "gRPC endpoints, comma-separated (etcdctl's)")
      ->capture_default_str()
      ->envname("ETCDCTL_ENDPOINTS");
  app.add_option("--cacert", f.cacert, "verify the server's certificate with this CA bundle")->envname("ETCDCTL_CACERT");
  app.add_option("--cert", f.cert, "client certificate for TLS")->envname("ETCDCTL_CERT");
  app.add_option("--key", f.key, "client key for TLS")->envname("ETCDCTL_KEY");
  app.add_option("--user", f.user, "username[:password] for auth")->envname("ETCDCTL_USER");
  app.add_option("--password", f.password, "password for auth (if --user has none)")->envname("ETCDCTL_PASSWORD");
  app.add_flag("--insecure-skip-tls-verify", f.insecure_skip_verify, "accept any server certificate")
      ->envname("ETCDCTL_INSECURE_SKIP_TLS_VERIFY");
  app.add_option("--dial-timeout", f.dial_timeout_s, "seconds to connect")->capture_default_str();
  app.add_option("--command-timeout", f.command_timeout_s, "seconds for each request")->capture_default_str();
  app.require_subcommand(1);
  app.fallthrough();  // connection flags anywhere, as etcdctl takes them
  std::string name;
  int64_t n = 10;
  auto* ls = app.add_subcommand("ls", "list queues and their depth");
  double interval_s = 1;
  auto* stat = app.add_subcommand(
      "stat", "one queue: depth, oldest, dead letters, settings; in flight, consumers, rates from the member's page");
  stat->add_option("NAME", name, "queue")->required();
  stat->add_option("--interval", interval_s, "seconds between the two reads rates come from (0: no rates)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60.0));
  stat->add_option("--http-endpoint", f.http_endpoint,
                   "the member's HTTP URL when its gRPC endpoint serves no HTTP (--listen-client-http-urls)");
  auto* peek = app.add_subcommand("peek", "the first N messages, unchanged");
  peek->add_option("NAME", name, "queue")->required();
  peek->add_option("N", n, "how many")->capture_default_str();
  auto* redrive = app.add_subcommand("redrive", "dead letters back into their queue");
  redrive->add_option("NAME", name, "the dead-letter queue, NAME.dlq")->required();
  auto* purge = app.add_subcommand("purge", "delete every message of a queue");
  purge->add_option("NAME", name, "queue")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    CtlClient c(f);
    if (ls->parsed()) return cmd_ls(c);
    if (stat->parsed()) return cmd_stat(f, c, name, interval_s);
    if (peek->parsed()) return cmd_peek(c, name, n);
    if (redrive->parsed()) return cmd_redrive(c, name);
    if (purge->parsed()) return cmd_purge(c, name);
  } catch (const CtlError& e) {
    std::fprintf(stderr, "etcdq queue: %s\n", e.message.c_str());
    return 1;
  }
  return 1;
}

}  // namespace etcdq::queue
