#include "common/memory.h"

#include <malloc.h>

// gperftools' C entry point (gperftools/malloc_extension_c.h), declared
// weak: it resolves when libtcmalloc_minimal is in the process, and is null
// where glibc's malloc is the one.
extern "C" void MallocExtension_ReleaseFreeMemory() __attribute__((weak));

namespace etcdq::common {

void release_free_memory() {
  if (MallocExtension_ReleaseFreeMemory != nullptr) {
    MallocExtension_ReleaseFreeMemory();
  } else {
    malloc_trim(0);
  }
}

}  // namespace etcdq::common
