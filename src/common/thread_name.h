// Names the calling thread as `top -H`, `perf` and /proc/<pid>/task/*/comm
// show it, so that a profile or a stuck member says which of its threads is
// busy. Linux keeps at most 15 bytes; a longer name is cut. Best effort:
// a failure changes nothing else.
//
// Thread-safety: names only the calling thread.
#pragma once

#include <pthread.h>

#include <string>

namespace etcdq {

inline void set_thread_name(const std::string& name) {
  std::string n = name.substr(0, 15);
  (void)pthread_setname_np(pthread_self(), n.c_str());
}

}  // namespace etcdq
