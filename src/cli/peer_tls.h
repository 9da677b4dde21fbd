// Peer TLS from etcd's --peer-* flags (cli/flags.h): the net::TlsContext the
// peer URL's TLS listener and libraft's outgoing connections use (one key
// pair both ways, as etcd's rafthttp), and the gRPC credentials of the
// member-only calls a member makes (raft/forwarder.h).
//
// etcd's semantics (embed/etcd.go, transport/listener.go): the peer's
// certificate must verify against --peer-trusted-ca-file (required when it
// is set or with --peer-client-cert-auth) and pass --peer-cert-allowed-cn /
// --peer-cert-allowed-hostname; a member dialing checks the certificate of
// the member it dials against the CA and the host it dialed. With
// --peer-auto-tls, a self-signed certificate in <data-dir>/fixtures/peer
// and no verification of the other side (etcd's InsecureSkipVerify).
//
// Rotation: the TLS listener and libraft's connections reload the files
// per handshake (net/tls_context.h); the gRPC credentials watch the files
// (gRPC's FileWatcherCertificateProvider, re-read every kRefreshSeconds),
// so a rotated key pair needs no restart.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "cli/flags.h"
#include "common/error.h"
#include "net/tls_context.h"

namespace etcdq::cli {

constexpr int kPeerCredentialsRefreshSeconds = 1;

// Reads every file now, so a bad one stops the start naming the flag and
// the file (InvalidArgument).
Error open_peer_tls(const Config& cfg, std::shared_ptr<net::TlsContext>* out);

// Credentials for channels to other members' peer URLs, from the context's
// options (after open_peer_tls).
std::shared_ptr<grpc::ChannelCredentials> peer_channel_credentials(const net::TlsOptions& o);

}  // namespace etcdq::cli
