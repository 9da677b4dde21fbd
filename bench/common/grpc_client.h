// What the load generators share about talking to an etcd v3 server.
//
// Endpoints are loopback only ("127.0.0.1:port", "localhost:port",
// "[::1]:port", optionally with http://): the tools must never load a remote
// machine by accident. Every function here is thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bench {

// Monotonic clock, nanoseconds.
int64_t now_ns();

// "http://127.0.0.1:2379" -> "127.0.0.1:2379"; false for non-loopback hosts.
bool loopback_target(std::string endpoint, std::string* target);

// "a,b,c" -> targets; false (and a message on stderr) if one is not loopback.
bool parse_endpoints(const std::string& list, std::vector<std::string>* targets);

// A channel with its own TCP connection: gRPC shares one connection between
// channels with equal arguments, so each gets a distinct `id` argument and a
// local subchannel pool. No message size limit on receive.
std::shared_ptr<grpc::Channel> make_channel(const std::string& target, int id);

// Process CPU time (user + system), seconds.
double process_cpu_seconds();

}  // namespace bench
