#include "keyspace/registry.h"

namespace etcdq::keyspace {
namespace {

std::vector<std::unique_ptr<Kind>>& registered() {
  static std::vector<std::unique_ptr<Kind>> all;
  return all;
}

}  // namespace

void add_kind(std::unique_ptr<Kind> kind) {
  for (const auto& k : registered()) {
    if (k->name() == kind->name()) return;
  }
  registered().push_back(std::move(kind));
}

const std::vector<std::unique_ptr<Kind>>& kinds() { return registered(); }

const Kind* owner(std::string_view key) {
  for (const auto& k : registered()) {
    if (k->owns(key)) return k.get();
  }
  return nullptr;
}

const Kind* command_owner(const apply::Command& cmd) {
  for (const auto& k : registered()) {
    if (k->owns_command(cmd)) return k.get();
  }
  return nullptr;
}

void read_range(std::string* key, std::string* end) {
  for (const auto& k : registered()) k->read_range(key, end);
}

void delete_range(std::string* key, std::string* end) {
  for (const auto& k : registered()) k->delete_range(key, end);
}

std::vector<Range> touches(std::string_view key, std::string_view end, bool write) {
  std::vector<Range> out;
  for (const auto& k : registered()) k->touches(key, end, write, &out);
  return out;
}

Error validate_put(const etcdserverpb::PutRequest& r) {
  const Kind* k = owner(r.key());
  return k ? k->validate_put(r) : Error();
}

std::unique_ptr<Instances> Instances::open(const InstanceEnv& env) {
  auto out = std::make_unique<Instances>();
  for (const auto& k : registered()) out->all_.push_back(k->open(env));
  return out;
}

Instance* Instances::find(std::string_view name) const {
  for (const auto& i : all_) {
    if (i->kind().name() == name) return i.get();
  }
  return nullptr;
}

bool Instances::watch_created(mvcc::WatchSink* sink, int64_t watch_id, std::string_view key, std::string_view end) {
  for (const auto& i : all_) {
    if (i->watch_created(sink, watch_id, key, end)) return true;
  }
  return false;
}

bool Instances::watch_canceled(mvcc::WatchSink* sink, int64_t watch_id) {
  bool held = false;
  for (const auto& i : all_) held = i->watch_canceled(sink, watch_id) || held;
  return held;
}

void Instances::stream_closed(mvcc::WatchSink* sink) {
  for (const auto& i : all_) i->stream_closed(sink);
}

void Instances::serve(const MemberServices& m) {
  for (const auto& i : all_) i->serve(m);
}

void Instances::set_leading(bool leading) {
  for (const auto& i : all_) i->set_leading(leading);
}

void Instances::stop() {
  for (const auto& i : all_) i->stop();
}

bool Instances::peer_report(uint64_t from, const google::protobuf::Message& report) {
  for (const auto& i : all_) {
    if (i->peer_report(from, report)) return true;
  }
  return false;
}

void Instances::collect_metrics(int64_t now_ms, std::vector<prometheus::MetricFamily>* out) const {
  for (const auto& i : all_) i->collect_metrics(now_ms, out);
}

bool Instances::page(std::string_view path, int64_t now_ms, const MayRead& may_read, Page* out) const {
  for (const auto& i : all_) {
    if (i->page(path, now_ms, may_read, out)) return true;
  }
  return false;
}

}  // namespace etcdq::keyspace
