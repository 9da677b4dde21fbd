#include "cli/config_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

namespace etcdq::cli {
namespace {

// The Go type of each key etcdq uses (etcd's embed.Config field types).
enum class Kind { kString, kUint, kUint64, kInt, kBool, kStrings, kDurationNs };

const std::map<std::string, Kind>& keys() {
  static const std::map<std::string, Kind> k = {
      {"name", Kind::kString},
      {"data-dir", Kind::kString},
      {"listen-peer-urls", Kind::kString},
      {"listen-client-urls", Kind::kString},
      {"listen-client-http-urls", Kind::kString},
      {"listen-metrics-urls", Kind::kString},
      {"initial-advertise-peer-urls", Kind::kString},
      {"advertise-client-urls", Kind::kString},
      {"initial-cluster", Kind::kString},
      {"initial-cluster-state", Kind::kString},
      {"initial-cluster-token", Kind::kString},
      {"snapshot-count", Kind::kUint64},
      {"heartbeat-interval", Kind::kUint},
      {"election-timeout", Kind::kUint},
      {"max-txn-ops", Kind::kUint},
      {"max-request-bytes", Kind::kUint},
      {"quota-backend-bytes", Kind::kInt},
      {"auth-token", Kind::kString},
      {"auth-token-ttl", Kind::kUint},
      {"bcrypt-cost", Kind::kUint},
      {"strict-reconfig-check", Kind::kBool},
      {"pre-vote", Kind::kBool},
      {"auto-compaction-mode", Kind::kString},
      {"auto-compaction-retention", Kind::kString},
      {"logger", Kind::kString},
      {"log-level", Kind::kString},
      {"log-outputs", Kind::kStrings},
      // A time.Duration, which etcd's JSON step reads as nanoseconds.
      {"experimental-watch-progress-notify-interval", Kind::kDurationNs},
      // etcd 3.6 (cli/flags.h).
      {"watch-progress-notify-interval", Kind::kDurationNs},
      {"wal-dir", Kind::kString},
      {"force-new-cluster", Kind::kBool},
      {"feature-gates", Kind::kString},
      {"max-learners", Kind::kInt},
      {"snapshot-catchup-entries", Kind::kUint},
      {"experimental-snapshot-catchup-entries", Kind::kUint},
      {"cipher-suites", Kind::kStrings},
      {"tls-min-version", Kind::kString},
      {"tls-max-version", Kind::kString},
      // etcdq's own.
      {"clickhouse-url", Kind::kString},
      {"clickhouse-db", Kind::kString},
  };
  return k;
}

const char* go_type(Kind k) {
  switch (k) {
    case Kind::kString: return "string";
    case Kind::kUint: return "uint";
    case Kind::kUint64: return "uint64";
    case Kind::kInt: return "int64";
    case Kind::kBool: return "bool";
    case Kind::kStrings: return "[]string";
    case Kind::kDurationNs: return "time.Duration";
  }
  return "?";
}

// What a YAML value is, as go-yaml (YAML 1.1) resolves it.
enum class Yaml { kNull, kString, kInt, kFloat, kBool, kSequence, kMap };

const char* json_name(Yaml y) {
  switch (y) {
    case Yaml::kNull: return "null";
    case Yaml::kString: return "string";
    case Yaml::kInt:
    case Yaml::kFloat: return "number";
    case Yaml::kBool: return "bool";
    case Yaml::kSequence: return "array";
    case Yaml::kMap: return "object";
  }
  return "?";
}

Yaml resolve(const YAML::Node& n, bool* bool_value) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return Yaml::kNull;
    case YAML::NodeType::Sequence: return Yaml::kSequence;
    case YAML::NodeType::Map: return Yaml::kMap;
    case YAML::NodeType::Scalar: break;
  }
  // Quoted scalars (tag "!") and explicit !!str are strings whatever they say.
  if (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str") return Yaml::kString;
  const std::string& s = n.Scalar();
  static const std::regex kNull("~|null|Null|NULL|");
  static const std::regex kTrue("y|Y|yes|Yes|YES|true|True|TRUE|on|On|ON");
  static const std::regex kFalse("n|N|no|No|NO|false|False|FALSE|off|Off|OFF");
  static const std::regex kInt("[-+]?(0|[1-9][0-9_]*|0x[0-9a-fA-F_]+|0[0-7_]+|0b[01_]+)");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
  if (std::regex_match(s, kNull)) return Yaml::kNull;
  if (std::regex_match(s, kTrue)) {
    *bool_value = true;
    return Yaml::kBool;
  }
  if (std::regex_match(s, kFalse)) {
    *bool_value = false;
    return Yaml::kBool;
  }
  if (std::regex_match(s, kInt)) return Yaml::kInt;
  if (std::regex_match(s, kFloat)) return Yaml::kFloat;
  return Yaml::kString;
}

// etcd 3.6's words for a type mismatch (sigs.k8s.io/yaml over
// encoding/json's UnmarshalTypeError), which name the key by its Go path:
// configYAML embeds embed.Config and configJSON (the URL lists, the
// feature gates and the two securityConfig blocks).
Error type_error(const std::string& key, const std::string& what, Kind want) {
  static const char* const kConfigJson[] = {"listen-peer-urls", "listen-client-urls", "listen-client-http-urls",
                                            "initial-advertise-peer-urls", "advertise-client-urls", "cors",
                                            "host-whitelist", "feature-gates"};
  std::string field = "configYAML.Config." + key;
  if (key.find('.') != std::string::npos) {
    field = "securityConfig.configJSON." + key;  // <block>.<key> (security_block)
  } else if (std::find(std::begin(kConfigJson), std::end(kConfigJson), key) != std::end(kConfigJson)) {
    field = "configYAML.configJSON." + key;
  }
  return {Code::kInvalidArgument, "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal " + what +
                                      " into Go struct field " + field + " of type " + go_type(want)};
}

// The integer a plain YAML int denotes (decimal, 0x, 0 octal, 0b).
bool yaml_int(std::string s, long double* out) {
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  bool neg = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s = s.substr(1);
  int base = 10;
  if (s.rfind("0x", 0) == 0) base = 16, s = s.substr(2);
  else if (s.rfind("0b", 0) == 0) base = 2, s = s.substr(2);
  else if (s.size() > 1 && s[0] == '0') base = 8, s = s.substr(1);
  long double v = 0;
  for (char c : s) {
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
    v = v * base + d;
  }
  *out = neg ? -v : v;
  return true;
}

std::string integer_text(long double v) {
  std::ostringstream ss;
  ss.precision(0);
  ss << std::fixed << v;
  return ss.str();
}

// One scalar of a string-typed key.
Error string_value(const std::string& key, const YAML::Node& n, Kind kind, std::string* out,
                   bool* present) {
  bool b = false;
  Yaml y = resolve(n, &b);
  *present = y != Yaml::kNull;
  if (y == Yaml::kNull) return {};
  if (y != Yaml::kString) return type_error(key, json_name(y), kind);
  *out = n.Scalar();
  return {};
}

Error strings_value(const std::string& key, const YAML::Node& n,
                    std::vector<std::string>* out, bool* present) {
  bool b = false;
  Yaml y = resolve(n, &b);
  *present = y != Yaml::kNull;
  if (y == Yaml::kNull) return {};
  if (y != Yaml::kSequence) return type_error(key, json_name(y), Kind::kStrings);
  for (const auto& item : n) {
    bool item_present = false;
    std::string s;
    if (Error e = string_value(key, item, Kind::kStrings, &s, &item_present)) return e;
    out->push_back(s);
  }
  return {};
}

Error bool_value(const std::string& key, const YAML::Node& n, bool* out, bool* present) {
  bool b = false;
  Yaml y = resolve(n, &b);
  *present = y != Yaml::kNull;
  if (y == Yaml::kNull) return {};
  if (y != Yaml::kBool) return type_error(key, json_name(y), Kind::kBool);
  *out = b;
  return {};
}

Error security_block(const std::string& path, const std::string& key, const YAML::Node& n, TransportSecurity* out) {
  bool b = false;
  Yaml y = resolve(n, &b);
  if (y == Yaml::kNull) return {};
  if (y != Yaml::kMap) {
    return {Code::kInvalidArgument, "config file " + path + ": invalid " + key + " (want a map of cert-file, key-file, ...)"};
  }
  for (const auto& kv : n) {
    std::string k = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    std::string where = key + "." + k;
    bool present = false;
    Error e;
    if (k == "cert-file") e = string_value(where, v, Kind::kString, &out->cert_file, &present);
    else if (k == "key-file") e = string_value(where, v, Kind::kString, &out->key_file, &present);
    else if (k == "client-cert-file") e = string_value(where, v, Kind::kString, &out->client_cert_file, &present);
    else if (k == "client-key-file") e = string_value(where, v, Kind::kString, &out->client_key_file, &present);
    else if (k == "trusted-ca-file") e = string_value(where, v, Kind::kString, &out->trusted_ca_file, &present);
    else if (k == "client-cert-auth") e = bool_value(where, v, &out->client_cert_auth, &present);
    else if (k == "auto-tls") e = bool_value(where, v, &out->auto_tls, &present);
    else if (k == "allowed-cn" || k == "allowed-hostname") {
      // A string in etcd 3.4, a list since 3.5: take either.
      auto* list = k == "allowed-cn" ? &out->allowed_cn : &out->allowed_hostname;
      if (v.IsSequence()) {
        e = strings_value(where, v, list, &present);
      } else {
        std::string s;
        e = string_value(where, v, Kind::kString, &s, &present);
        if (!e && present && !s.empty()) list->push_back(s);
      }
    }
    if (e) return e;
  }
  return {};
}

}  // namespace

Error read_config_file(const std::string& path, ConfigFile* out) {
  YAML::Node root;
  try {
    std::ifstream in(path);
    if (!in) return {Code::kInvalidArgument, "config file " + path + ": cannot open it"};
    root = YAML::Load(in);
  } catch (const YAML::Exception& e) {
    return {Code::kInvalidArgument, "config file " + path + ": " + e.what()};
  }
  bool b = false;
  Yaml top = resolve(root, &b);
  if (top == Yaml::kNull) return {};  // an empty file: every default
  if (top != Yaml::kMap) {
    return {Code::kInvalidArgument, "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal " +
                                        std::string(json_name(top)) + " into Go value of type embed.configYAML"};
  }
  try {
    for (const auto& kv : root) {
      std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "client-transport-security") {
        if (Error e = security_block(path, key, v, &out->client_security)) return e;
        continue;
      }
      if (key == "peer-transport-security") {
        if (Error e = security_block(path, key, v, &out->peer_security)) return e;
        continue;
      }
      auto it = keys().find(key);
      if (it == keys().end()) {
        out->ignored.push_back(key);
        continue;
      }
      Kind kind = it->second;
      bool bv = false;
      Yaml y = resolve(v, &bv);
      if (y == Yaml::kNull) continue;  // the default stays
      std::string value;
      switch (kind) {
        case Kind::kString:
          if (y != Yaml::kString) return type_error(key, json_name(y), kind);
          value = v.Scalar();
          break;
        case Kind::kBool:
          if (y != Yaml::kBool) return type_error(key, json_name(y), kind);
          value = bv ? "true" : "false";
          break;
        case Kind::kUint:
        case Kind::kUint64:
        case Kind::kInt:
        case Kind::kDurationNs: {
          long double n = 0;
          if (y == Yaml::kInt) yaml_int(v.Scalar(), &n);
          if (y != Yaml::kInt || ((kind == Kind::kUint || kind == Kind::kUint64) && n < 0)) {
            std::string what = json_name(y);
            if (y == Yaml::kInt || y == Yaml::kFloat) what += " " + v.Scalar();
            return type_error(key, what, kind);
          }
          if (kind == Kind::kDurationNs) {
            // Nanoseconds, as the flag's Go duration in milliseconds.
            std::ostringstream ss;
            ss.precision(3);
            ss << std::fixed << static_cast<double>(n / 1e6L) << "ms";
            value = ss.str();
          } else {
            value = integer_text(n);
          }
          break;
        }
        case Kind::kStrings: {
          std::vector<std::string> items;
          bool present = false;
          if (Error e = strings_value(key, v, &items, &present)) return e;
          for (const auto& s : items) value += (value.empty() ? "" : ",") + s;
          break;
        }
      }
      // A key given twice: the last one counts (go-yaml v2, which etcd 3.4
      // uses, takes it without complaint).
      out->values.erase(std::remove_if(out->values.begin(), out->values.end(),
                                       [&key](const auto& kv) { return kv.first == key; }),
                        out->values.end());
      out->values.emplace_back(key, value);
    }
  } catch (const YAML::Exception& e) {
    return {Code::kInvalidArgument, "config file " + path + ": " + e.what()};
  }
  return {};
}

}  // namespace etcdq::cli
