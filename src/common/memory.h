// Giving freed memory back to the system, whichever malloc the process has:
// gperftools' tcmalloc in the member (CMakeLists.txt, "malloc"), glibc's in
// the tests and sanitized builds. Both keep freed memory for reuse, so the
// RSS of a member that served a burst (stuck watch streams, a big range)
// would not come down without this.
//
// Cost: walks the allocator's free lists (tens of milliseconds for a
// large heap); call it rarely (watch_service.cc: at most once a second,
// after big streams closed). Thread-safety: any thread.
#pragma once

namespace etcdq::common {

void release_free_memory();

}  // namespace etcdq::common
