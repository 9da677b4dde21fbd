// The watchers of one watch stream, by watch id, with what the stream
// needs per watcher: the create request's fragment and progress_notify,
// and the watcher's last queued events response (watch_outbox.h joins
// later events to it). Ids follow etcd's v3rpc watch server: a create
// that names an id (watch_id != 0) gets it unless this stream has it
// already; otherwise the next id not in use, counting from 0.
//
// Thread-safety: none; the stream's lock guards every call.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/watch_outbox.h"

namespace etcdq::server {

class StreamWatchers {
 public:
  struct Watcher {
    bool fragment = false;
    bool progress_notify = false;
    uint64_t open_seq = WatchOutbox::kNoResponse;
  };

  // Adds `w` as `requested` (0: the next free id), into *id. Returns ""
  // or etcd's reason to refuse the create (then nothing is added and no
  // id is taken): "mvcc: duplicate watch ID provided on the WatchStream".
  std::string add(int64_t requested, const Watcher& w, int64_t* id);
  // Null when there is no such watcher.
  Watcher* find(int64_t id);
  bool contains(int64_t id) const { return watchers_.count(id) > 0; }
  // Whether it was there.
  bool remove(int64_t id) { return watchers_.erase(id) > 0; }
  void clear() { watchers_.clear(); }
  // The ids of the watchers that asked for progress notifications.
  std::vector<int64_t> progress_notify_ids() const;

 private:
  std::map<int64_t, Watcher> watchers_;
  int64_t next_id_ = 0;
};

}  // namespace etcdq::server
