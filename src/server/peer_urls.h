// Peer URLs of MemberAdd and MemberUpdate, checked as etcd checks them
// (client/pkg/types/urls.go NewURLs): each URL, with surrounding white
// space trimmed, must parse as Go's net/url does, have the scheme http,
// https, unix or unixs, a host of the form "host:port" (net.SplitHostPort:
// the host may be empty, the port any digits or none) and no path.
// Userinfo, query and fragment are allowed, as in etcd.
//
// etcdq reaches its peers over TCP or TLS (https://, peer TLS), not over
// unix sockets, so a URL etcd would take with the scheme unix or unixs is
// refused here too.
//
// Pure functions; any thread.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"

namespace etcdq::server {

struct PeerUrls {
  std::vector<std::string> urls;  // trimmed, scheme in lower case, sorted (as etcd answers them)
  std::string address;            // "host:port" of the first URL given: libraft's address of the member
};

// Errors: member_bad_urls() (InvalidArgument "etcdserver: given member URLs
// are invalid") for no URL or any URL etcd refuses.
Error parse_peer_urls(const std::vector<std::string>& urls, PeerUrls* out);

}  // namespace etcdq::server
