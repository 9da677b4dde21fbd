// etcd's --config-file: a YAML map whose keys are etcd's flag names without
// the dashes (embed.Config's yaml tags, see etcd.conf.yml.sample). etcd reads
// it with sigs.k8s.io/yaml into a Go struct, so this follows what that does:
//
//   - unknown keys are ignored (listed in `ignored`, which main logs);
//   - a null value (`data-dir:`) leaves the default;
//   - the value must have the key's Go type: a string key refuses a number
//     or a bool (`auto-compaction-retention: 1` fails, `"1"` works), a uint
//     key a negative or fractional number or a string, `log-outputs` must be
//     a list; the error names the key, in etcd's words;
//   - client-transport-security / peer-transport-security are maps, kept
//     here for TLS (flags.cc: the client block is served, the peer block
//     refused while peer TLS is not implemented).
//
// The values become "--key=value" arguments that flags.cc parses with the
// same option definitions as the command line (one definition a flag).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace etcdq::cli {

// One *-transport-security block (etcd's securityConfig).
struct TransportSecurity {
  std::string cert_file;
  std::string key_file;
  std::string client_cert_file;
  std::string client_key_file;
  bool client_cert_auth = false;
  std::string trusted_ca_file;
  bool auto_tls = false;
  std::vector<std::string> allowed_cn;
  std::vector<std::string> allowed_hostname;
  // Anything that asks for TLS (an empty block, as in etcd's sample, does not).
  bool requested() const {
    return !cert_file.empty() || !key_file.empty() || !client_cert_file.empty() || !client_key_file.empty() ||
           client_cert_auth || !trusted_ca_file.empty() || auto_tls || !allowed_cn.empty() ||
           !allowed_hostname.empty();
  }
};

struct ConfigFile {
  // (flag name without dashes, value as the command line would give it),
  // in file order.
  std::vector<std::pair<std::string, std::string>> values;
  TransportSecurity client_security;
  TransportSecurity peer_security;
  std::vector<std::string> ignored;  // keys etcdq has no use for
};

// Errors: InvalidArgument "config file <path>: ..." for an unreadable file,
// bad YAML (with its line), or a value of the wrong type (naming the key).
Error read_config_file(const std::string& path, ConfigFile* out);

}  // namespace etcdq::cli
