#include "common/grpc_client.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace bench {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool loopback_target(std::string e, std::string* target) {
  for (const char* scheme : {"http://", "https://"})
    if (e.rfind(scheme, 0) == 0) e = e.substr(std::strlen(scheme));
  while (!e.empty() && e.back() == '/') e.pop_back();
  auto colon = e.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = e.substr(0, colon);
  bool ok = host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
  if (ok) *target = e;
  return ok;
}

bool parse_endpoints(const std::string& list, std::vector<std::string>* targets) {
  targets->clear();
  std::stringstream ss(list);
  std::string e;
  while (std::getline(ss, e, ',')) {
    if (e.empty()) continue;
    std::string t;
    if (!loopback_target(e, &t)) {
      std::fprintf(stderr, "endpoint %s: only loopback host:port endpoints are allowed\n", e.c_str());
      return false;
    }
    targets->push_back(t);
  }
  if (targets->empty()) std::fprintf(stderr, "no endpoints\n");
  return !targets->empty();
}

std::shared_ptr<grpc::Channel> make_channel(const std::string& target, int id) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("etcdq_bench.channel_id", id);
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

double process_cpu_seconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

}  // namespace bench
