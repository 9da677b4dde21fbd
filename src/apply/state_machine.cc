#include "apply/state_machine.h"

namespace etcdq::apply {

Error StateMachine::open(const std::string& db_path, const StateMachineOptions& o,
                         std::unique_ptr<StateMachine>* out) {
  std::unique_ptr<storage::Engine> engine;
  if (Error e = storage::Engine::open(db_path, &engine)) return e;
  *out = std::make_unique<StateMachine>(std::move(engine), o);
  return {};
}

StateMachine::StateMachine(std::unique_ptr<storage::Engine> engine, const StateMachineOptions& o)
    : owned_engine_(std::move(engine)), engine_(owned_engine_.get()) {
  build(o);
}

StateMachine::StateMachine(storage::Engine* engine, const StateMachineOptions& o) : engine_(engine) { build(o); }

StateMachine::~StateMachine() {
  // Members go in reverse declaration order anyway; spelled out because
  // the order is the point (the applier points into all the others, and
  // they all into the engine).
  applier_.reset();
  auth_.reset();
  plugins_.reset();
  members_.reset();
  alarms_.reset();
  lessor_.reset();
  store_.reset();
  owned_engine_.reset();
}

void StateMachine::build(const StateMachineOptions& o) {
  store_ = std::make_unique<mvcc::Store>(engine_);
  lessor_ = std::make_unique<lease::Lessor>(engine_, o.min_lease_ttl_seconds);
  alarms_ = std::make_unique<Alarms>(engine_);
  members_ = std::make_unique<Members>(engine_);
  plugins_ = keyspace::Instances::open({engine_, store_.get(), o.member_id});
  auth_ = std::make_unique<auth::Store>(engine_);
  applier_ = std::make_unique<Applier>(store_.get(), lessor_.get(), alarms_.get(), members_.get(), plugins_.get(),
                                       auth_.get());
}

}  // namespace etcdq::apply
