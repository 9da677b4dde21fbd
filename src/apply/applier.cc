#include "apply/applier.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "apply/apply_metrics.h"
#include "apply/auth_layer.h"
#include "apply/backend.h"
#include "apply/capped_layer.h"
#include "apply/corrupt_layer.h"
#include "apply/entry.h"
#include "apply/plugin_layer.h"
#include "common/metrics.h"
#include "etcdq/command.pb.h"
#include "keyspace/registry.h"

namespace etcdq::apply {

Applier::Applier(mvcc::Store* store, lease::Lessor* lessor, Alarms* alarms, Members* members,
                 keyspace::Instances* plugins, auth::Store* auth)
    : store_(store),
      lessor_(lessor),
      alarms_(alarms),
      members_(members),
      applied_index_(store->view()->applied_index()) {
  register_apply_metrics();
  auto add = [this](std::unique_ptr<Layer> l) {
    head_ = l.get();
    layers_.push_back(std::move(l));
  };
  add(std::make_unique<BackendLayer>(lessor, alarms, members));
  // One layer per plug-in, above the backend: the KV ops below see their
  // keys through it. The key space readers use is the topmost's (one
  // plug-in today; two would need their key spaces combined).
  if (plugins != nullptr) {
    for (const auto& i : plugins->all()) {
      auto l = std::make_unique<PluginLayer>(i.get(), head_);
      keys_ = &l->keys();
      add(std::move(l));
    }
  }
  add(std::make_unique<AuthLayer>(auth, head_));
  add(std::make_unique<CappedLayer>(alarms, head_));
  add(std::make_unique<CorruptLayer>(alarms, head_));
}

Applier::~Applier() {
  // Top first: each layer goes while the one it holds is still there.
  while (!layers_.empty()) layers_.pop_back();
}

std::vector<std::string_view> Applier::chain() const {
  std::vector<std::string_view> names;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) names.push_back((*it)->name());
  return names;
}

Error Applier::apply(uint64_t index, std::string_view payload, std::vector<Result>* results) {
  if (index <= applied_index_) return {};  // applied before a restart
  mvcc::Writer w(store_);
  head_->begin_entry(w);
  std::string_view rest = payload;
  std::string_view bytes;
  bool corrupt = false;
  while (next_framed(&rest, &bytes, &corrupt)) {
    results->emplace_back();
    apply_command(w, bytes, &results->back());
  }
  if (corrupt) {
    // libraft checksums entries, so a bad frame came from its proposer (a
    // peer with a bad build): every member skips the rest of the entry the
    // same way, which keeps them equal; stopping would stop them all, for
    // good, since the entry is committed.
    spdlog::error("log entry {} has a badly framed command: skipping the rest of the entry", index);
  }
  head_->before_commit(w);
  if (Error e = w.commit(index)) return e;
  applied_index_ = index;
  head_->committed(w.revision());
  return {};
}

Error Applier::apply_noop(uint64_t index) {
  if (index <= applied_index_) return {};
  mvcc::Writer w(store_);
  if (Error e = w.commit(index)) return e;
  applied_index_ = index;
  return {};
}

void Applier::apply_command(mvcc::Writer& w, std::string_view bytes, Result* out) {
  Command cmd;
  if (!decode_command(bytes, &cmd)) {
    out->error = errors::internal("undecodable command in the log");
    spdlog::error("skipping an undecodable command ({} bytes)", bytes.size());
    return;
  }
  out->origin = cmd.origin();
  out->proposal_id = cmd.proposal_id();
  ApplyCtx c{w, cmd};
  auto start = std::chrono::steady_clock::now();
  run(*head_, c, out);
  observe_apply(cmd.request_case(), out->error, metrics::seconds_since(start));
}

}  // namespace etcdq::apply
