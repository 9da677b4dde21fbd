#include "server/stream_watchers.h"

namespace etcdq::server {

std::string StreamWatchers::add(int64_t requested, const Watcher& w, int64_t* id) {
  if (requested != 0) {
    if (watchers_.count(requested)) return "mvcc: duplicate watch ID provided on the WatchStream";
    *id = requested;
  } else {
    while (watchers_.count(next_id_)) ++next_id_;
    *id = next_id_++;
  }
  watchers_[*id] = w;
  return "";
}

StreamWatchers::Watcher* StreamWatchers::find(int64_t id) {
  auto it = watchers_.find(id);
  return it != watchers_.end() ? &it->second : nullptr;
}

std::vector<int64_t> StreamWatchers::progress_notify_ids() const {
  std::vector<int64_t> ids;
  for (const auto& [id, w] : watchers_) {
    if (w.progress_notify) ids.push_back(id);
  }
  return ids;
}

}  // namespace etcdq::server
