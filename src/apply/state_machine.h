// One member's replicated state, built in one place: the database and
// everything that lives on it, in dependency order — storage::Engine, then
// the MVCC store, the lessor, the alarm and member tables, the instances of
// the key-space plug-ins registered (keyspace/registry.h), the auth store,
// and the Applier with its chain (applier.h) over all of them — and
// destroyed in the reverse order, so that nothing outlives what it points
// into. Each part reads its state from the database when it is built (a
// restart continues where the member stopped).
//
// Thread-safety: the parts' own (their headers); building and destroying
// are the owner's, with no other thread using the parts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "apply/alarms.h"
#include "apply/applier.h"
#include "apply/members.h"
#include "auth/store.h"
#include "common/error.h"
#include "lease/lessor.h"
#include "mvcc/store.h"
#include "keyspace/registry.h"
#include "storage/engine.h"

namespace etcdq::apply {

struct StateMachineOptions {
  // The shortest lease TTL granted (lease/lessor.h; etcd's minLeaseTTL,
  // from the election timeout).
  int64_t min_lease_ttl_seconds = 2;  // what etcd's default 1000 ms election timeout gives
  // This member's id, for the plug-ins' instances (keyspace/kind.h,
  // InstanceEnv). 0: none.
  uint64_t member_id = 0;
};

class StateMachine {
 public:
  // Opens (or creates) the database at `db_path` and builds the state on
  // it. Errors: the database's (storage/engine.h).
  static Error open(const std::string& db_path, const StateMachineOptions& o, std::unique_ptr<StateMachine>* out);
  // Builds the state on an open database and owns it from then on.
  StateMachine(std::unique_ptr<storage::Engine> engine, const StateMachineOptions& o);
  // Builds the state on a database the caller keeps open for longer
  // (a fuzzer reuses one across inputs).
  StateMachine(storage::Engine* engine, const StateMachineOptions& o);
  ~StateMachine();
  StateMachine(const StateMachine&) = delete;
  StateMachine& operator=(const StateMachine&) = delete;

  storage::Engine* engine() const { return engine_; }
  mvcc::Store* store() const { return store_.get(); }
  lease::Lessor* lessor() const { return lessor_.get(); }
  Alarms* alarms() const { return alarms_.get(); }
  Members* members() const { return members_.get(); }
  // The key-space plug-ins' instances on this state (keyspace/registry.h).
  keyspace::Instances* plugins() const { return plugins_.get(); }
  auth::Store* auth() const { return auth_.get(); }
  Applier* applier() const { return applier_.get(); }

 private:
  void build(const StateMachineOptions& o);

  // Declared in construction order; destroyed bottom up.
  std::unique_ptr<storage::Engine> owned_engine_;
  storage::Engine* engine_;
  std::unique_ptr<mvcc::Store> store_;
  std::unique_ptr<lease::Lessor> lessor_;
  std::unique_ptr<Alarms> alarms_;
  std::unique_ptr<Members> members_;
  std::unique_ptr<keyspace::Instances> plugins_;
  std::unique_ptr<auth::Store> auth_;
  std::unique_ptr<Applier> applier_;
};

}  // namespace etcdq::apply
