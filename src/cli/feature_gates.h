// etcd 3.6's server feature gates (--feature-gates=Name=true,...; etcd's
// server/features/etcd_features.go and pkg/featuregate), and the
// --experimental-* flags 3.6 still takes in their place.
//
// Parsing and validation are etcd's, with its messages: an unknown name
// fails ("unrecognized feature gate: Bogus"), so does a value Go's
// strconv.ParseBool refuses or a name without "=value". AllAlpha / AllBeta
// set every gate of that stage that the same value does not name itself.
//
// What each gate does in etcdq is decided where it is used, not here:
// FeatureGates::enabled() is the one question callers ask. The corruption
// checks (InitialCorruptCheck, CompactHashCheck) belong to that work
// (branch corrupt-check); until it lands no code reads them, and
// cli/ignored_flags.cc says so in the start-up log.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace etcdq::cli {

struct FeatureGate {
  const char* name;
  bool default_value;
  const char* stage;  // "ALPHA" or "BETA", as etcd's --help prints it
  // The --experimental-* boolean flag 3.6 still takes for it; "" if none.
  const char* experimental_flag;
  // What it changes in etcdq (for the start-up log when it is set).
  const char* in_etcdq;
};

// etcd 3.6.17's gates, in its --help order (AllAlpha and AllBeta first).
const std::vector<FeatureGate>& etcd_feature_gates();

class FeatureGates {
 public:
  FeatureGates();  // every gate at its default
  // One --feature-gates value ("A=true,B=false"; "" changes nothing).
  // Errors (InvalidArgument): etcd's words after `invalid value "<value>"
  // for flag -feature-gates: `.
  Error set(const std::string& value);
  // The --experimental-* flags that were given (flag name -> value), checked
  // against the --feature-gates value as etcd 3.6 checks them
  // (embed.SetFeatureGatesFromExperimentalFlags, including its substring
  // match of the gate name), then applied.
  Error set_from_experimental(const std::map<std::string, bool>& given, const std::string& feature_gates_value);
  bool enabled(const std::string& name) const;
  // The gates set explicitly, "Name=value", in name order (for the log).
  std::vector<std::string> explicitly_set() const;
  // etcd_server_feature_enabled{name,stage}: each gate of
  // etcd_feature_gates() as set, 1 or 0, as etcd 3.6 registers them
  // (pkg/featuregate's AddMetrics). What a gate changes in etcdq is its
  // FeatureGate::in_etcdq. Call once, after parsing.
  void register_metrics() const;

 private:
  std::map<std::string, bool> enabled_;
  std::map<std::string, bool> explicit_;
};

}  // namespace etcdq::cli
