// The HTTP/2 guard (net/h2_guard.h) for plaintext connections gRPC reads
// itself: etcdq defines recvmsg(), sendmsg() and close(), which gRPC's
// shared library calls through the dynamic linker (an executable's
// definitions come first, as a malloc replacement's do). For an fd handed
// to guard_grpc_fd(), what gRPC reads passes the guard before gRPC sees it
// and what it writes is shown to the guard; every other fd of the process
// goes straight to libc (one table lookup). What the guard itself owes the
// client (RST_STREAM refusals of streams past the cap) is written between
// gRPC's frames: after a read or a write of gRPC's, never while a write of
// gRPC's on that fd is in the kernel (a flag under the connection's mutex),
// so nothing of gRPC's is half written meanwhile (a refusal half written
// makes gRPC's next write wait for the socket, EAGAIN, until it is whole).
//
// Why not the TLS pump's way (a copy through a socketpair, which TLS
// connections pay anyway): for plaintext the copy cost a large share of
// the throughput at etcd's benchmark scale (bench/RESULTS.md, "Measurements moved from headers").
//
// Where the pump would hold a frame, here the connection is cut instead:
// gRPC gets the bytes before the frame, then the socket is shut down
// (gRPC reads its end and closes the connection, as on any client that
// goes away). gRPC's poller cannot be told to read again later, so
// pacing is not possible here. A client that resets more unanswered
// streams than the buckets allow (kConnBurst, then kConnPerSecond; all
// guarded connections together kThreadBurst, then kThreadPerSecond) is
// disconnected, and logged (at most 5 lines a second).
//
// Thread-safety: guard_grpc_fd() from any thread, before the fd goes to
// gRPC; gRPC's reads and writes of one fd may run at once on two threads
// (a mutex a connection).
#pragma once

#include <functional>
#include <string>

namespace etcdq::net {

// Guards `fd` (an accepted TCP socket that opens with HTTP/2's preface,
// not yet read) until it is closed. `role` names the URL in logs
// ("client", "peer"). False, and nothing guarded, when the fd number is
// past what the table holds (kMaxGuardedFd): the caller closes it.
bool guard_grpc_fd(int fd, const std::string& role);

constexpr int kMaxGuardedFd = 1 << 20;

// `adopt` (a route that hands an fd to gRPC) with guard_grpc_fd() first;
// an fd that cannot be guarded is closed.
std::function<void(int)> guarded_route(std::function<void(int)> adopt, const std::string& role);

}  // namespace etcdq::net
