// The TLS a host serves and dials with (net/tls_context.h), from its config
// (host/config.h), as etcd's embed builds its listeners' TLS
// (embed/etcd.go configureClientListeners / configurePeerListeners).
//
// Client: the context every https:// client, client HTTP and metrics URL
// terminates TLS with. Peer: one key pair both ways, as etcd's rafthttp —
// the peer URL's TLS listener and libraft's outgoing connections use the
// context; the Peer service's calls a member makes (consensus/forwarder.h) use
// gRPC credentials from the same files.
//
// etcd's peer semantics (embed/etcd.go, transport/listener.go): the other
// member's certificate must verify against --peer-trusted-ca-file
// (required when it is set or with --peer-client-cert-auth) and pass
// --peer-cert-allowed-cn / --peer-cert-allowed-hostname; a member dialing
// checks the certificate of the member it dials against the CA and the
// host it dialed. With --peer-auto-tls, a self-signed certificate in
// <data-dir>/fixtures/peer and no verification of the other side (etcd's
// InsecureSkipVerify).
//
// Rotation: the TLS listeners and libraft's connections reload the files
// per handshake (net/tls_context.h); the gRPC credentials watch the files
// (gRPC's FileWatcherCertificateProvider, re-read every
// kPeerCredentialsRefreshSeconds), so a rotated key pair needs no restart.
//
// Every file is read here, so a bad one stops the start before the data
// dir is opened. Errors: InvalidArgument naming the flag and the file, or
// etcd's words for a cipher-suite list Go's HTTP/2 server refuses.
// Thread-safety: call from the thread that starts the host.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "common/error.h"
#include "host/config.h"
#include "net/tls_context.h"

namespace etcdq::host {

constexpr int kPeerCredentialsRefreshSeconds = 1;

Error open_client_tls(const Config& cfg, std::shared_ptr<net::TlsContext>* out);
Error open_peer_tls(const Config& cfg, std::shared_ptr<net::TlsContext>* out);

// Credentials for channels to other members' peer URLs, from the context's
// options (after open_peer_tls).
std::shared_ptr<grpc::ChannelCredentials> peer_channel_credentials(const net::TlsOptions& o);

}  // namespace etcdq::host
