#include "apply/plugin_layer.h"

namespace etcdq::apply {

void PluginKeys::read_range(std::string* key, std::string* end) const { instance_->kind().read_range(key, end); }

void PluginKeys::delete_range(std::string* key, std::string* end) const {
  instance_->kind().delete_range(key, end);
}

Error PluginKeys::put(mvcc::Writer& w, const etcdserverpb::PutRequest& r, int64_t time_ms,
                      etcdserverpb::PutResponse* resp) {
  if (!instance_->kind().owns(r.key())) return put_plain(w, r, resp);
  return instance_->put(w, r, time_ms, resp,
                        [&w, resp](const etcdserverpb::PutRequest& plain) { return put_plain(w, plain, resp); });
}

void PluginLayer::begin_entry(mvcc::Writer& w) {
  instance_->begin_entry(w);
  next().begin_entry(w);
}

void PluginLayer::before_commit(mvcc::Writer& w) {
  instance_->before_commit(w);
  next().before_commit(w);
}

void PluginLayer::committed(int64_t revision) {
  instance_->committed(revision);
  next().committed(revision);
}

void PluginLayer::restored() {
  instance_->restored();
  next().restored();
}

Error PluginLayer::put(ApplyCtx& c, const etcdserverpb::PutRequest& r, etcdserverpb::PutResponse* resp) {
  c.keys = &keys_;
  return next().put(c, r, resp);
}

Error PluginLayer::delete_range(ApplyCtx& c, const etcdserverpb::DeleteRangeRequest& r,
                                etcdserverpb::DeleteRangeResponse* resp) {
  instance_->command_time(c.cmd.time_ms());
  c.keys = &keys_;
  return next().delete_range(c, r, resp);
}

Error PluginLayer::txn(ApplyCtx& c, const etcdserverpb::TxnRequest& r, etcdserverpb::TxnResponse* resp) {
  instance_->command_time(c.cmd.time_ms());
  c.keys = &keys_;
  return next().txn(c, r, resp);
}

Error PluginLayer::plugin_command(ApplyCtx& c) {
  if (!instance_->kind().owns_command(c.cmd)) return next().plugin_command(c);
  return instance_->apply_command(c.w, c.cmd);
}

}  // namespace etcdq::apply
