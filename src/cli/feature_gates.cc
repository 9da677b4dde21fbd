#include "cli/feature_gates.h"

#include <algorithm>

#include "common/metrics.h"

namespace etcdq::cli {
namespace {

// Go's strconv.ParseBool.
bool parse_go_bool(const std::string& s, bool* out) {
  static const char* kTrue[] = {"1", "t", "T", "TRUE", "true", "True"};
  static const char* kFalse[] = {"0", "f", "F", "FALSE", "false", "False"};
  for (const char* t : kTrue) {
    if (s == t) return *out = true, true;
  }
  for (const char* f : kFalse) {
    if (s == f) return *out = false, true;
  }
  return false;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r\v\f");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n\r\v\f");
  return s.substr(b, e - b + 1);
}

const FeatureGate* find_gate(const std::string& name) {
  for (const auto& g : etcd_feature_gates()) {
    if (name == g.name) return &g;
  }
  return nullptr;
}

}  // namespace

const std::vector<FeatureGate>& etcd_feature_gates() {
  static const std::vector<FeatureGate> gates = {
      {"AllAlpha", false, "ALPHA", "", "sets the alpha gates below"},
      {"AllBeta", false, "BETA", "", "sets the beta gates below"},
      {"CompactHashCheck", false, "ALPHA", "experimental-compact-hash-check-enabled",
       "nothing yet: etcdq has no compaction hash check (--corrupt-check-time compares whole histories)"},
      // Read by cli/flags.cc (finish_corrupt_check): the start-up check.
      {"InitialCorruptCheck", false, "ALPHA", "experimental-initial-corrupt-check",
       "the initial corruption check before serving (member/corruption_check.h)"},
      {"LeaseCheckpoint", false, "ALPHA", "experimental-enable-lease-checkpoint",
       "nothing: etcdq's lessor sends no TTL checkpoints"},
      {"LeaseCheckpointPersist", false, "ALPHA", "experimental-enable-lease-checkpoint-persist",
       "nothing: no lease checkpoints to persist"},
      {"SetMemberLocalAddr", false, "ALPHA", "", "nothing: libraft dials peers from any local address"},
      {"StopGRPCServiceOnDefrag", false, "ALPHA", "experimental-stop-grpc-service-on-defrag",
       "nothing: etcdq serves during a defragment (RocksDB compaction does not stop it)"},
      {"TxnModeWriteWithSharedBuffer", true, "BETA", "experimental-txn-mode-write-with-shared-buffer",
       "nothing: a bbolt read-buffer detail, etcdq has no bbolt"},
  };
  return gates;
}

FeatureGates::FeatureGates() {
  for (const auto& g : etcd_feature_gates()) enabled_[g.name] = g.default_value;
}

// pkg/featuregate featureGate.Set and SetFromMap: the whole value is
// checked before anything changes; AllAlpha/AllBeta then set the gates of
// their stage that the value does not set itself (setUnsetAlphaGates).
Error FeatureGates::set(const std::string& value) {
  std::map<std::string, bool> m;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    std::string s = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? value.size() + 1 : comma + 1;
    if (s.empty()) continue;
    size_t eq = s.find('=');
    std::string k = trim(s.substr(0, eq));
    if (eq == std::string::npos) return {Code::kInvalidArgument, "missing bool value for " + k};
    std::string v = trim(s.substr(eq + 1));
    bool b = false;
    if (!parse_go_bool(v, &b)) {
      return {Code::kInvalidArgument,
              "invalid value of " + k + "=" + v + ", err: strconv.ParseBool: parsing \"" + v + "\": invalid syntax"};
    }
    m[k] = b;
  }
  for (const auto& [k, v] : m) {
    if (find_gate(k) == nullptr) return {Code::kInvalidArgument, "unrecognized feature gate: " + k};
  }
  for (const auto& [k, v] : m) {
    enabled_[k] = v;
    explicit_[k] = v;
    if (k == "AllAlpha" || k == "AllBeta") {
      const char* stage = k == "AllAlpha" ? "ALPHA" : "BETA";
      for (const auto& g : etcd_feature_gates()) {
        if (std::string(g.stage) == stage && g.name != k && m.count(g.name) == 0) enabled_[g.name] = v;
      }
    }
  }
  return {};
}

Error FeatureGates::set_from_experimental(const std::map<std::string, bool>& given,
                                          const std::string& feature_gates_value) {
  std::map<std::string, bool> m;
  for (const auto& g : etcd_feature_gates()) {
    auto it = given.find(g.experimental_flag);
    if (*g.experimental_flag == '\0' || it == given.end()) continue;
    // etcd looks for the gate's name anywhere in the --feature-gates value.
    if (feature_gates_value.find(g.name) != std::string::npos) {
      std::string now = enabled(g.name) ? "true" : "false";
      return {Code::kInvalidArgument, "cannot specify both flags: --" + std::string(g.experimental_flag) + "=" +
                                          (it->second ? "true" : "false") + " and --feature-gates=" + g.name + "=" +
                                          now + " at the same time, please just use --feature-gates=" + g.name +
                                          "=" + now};
    }
    m[g.name] = it->second;
  }
  for (const auto& [k, v] : m) {
    enabled_[k] = v;
    explicit_[k] = v;
  }
  return {};
}

bool FeatureGates::enabled(const std::string& name) const {
  auto it = enabled_.find(name);
  return it != enabled_.end() && it->second;
}

std::vector<std::string> FeatureGates::explicitly_set() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : explicit_) out.push_back(k + "=" + (v ? "true" : "false"));
  return out;
}

void FeatureGates::register_metrics() const {
  auto& family = prometheus::BuildGauge()
                     .Name("etcd_server_feature_enabled")
                     .Help("Whether or not a feature is enabled. 1 is enabled, 0 is not.")
                     .Register(metrics::registry());
  for (const FeatureGate& g : etcd_feature_gates()) {
    family.Add({{"name", g.name}, {"stage", g.stage}}).Set(enabled(g.name) ? 1 : 0);
  }
}

}  // namespace etcdq::cli
