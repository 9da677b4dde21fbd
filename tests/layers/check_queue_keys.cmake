# Proves that the work queues are a key-space plug-in and nothing more
# (queue/key_space.h, keyspace/registry.h): no file of src/ outside
# src/queue/ names a queue key (a "/q/" literal), a queue type or function
# (queue::), or includes a queue header ("queue/...") — auth/, apply/,
# mvcc/, server/ and member/ ask the registry instead. The build cannot
# prove it alone: member/ links queue/ to wire it in, and what member/
# links, the layers above see.
#
# Run by ctest (layers.queue_keys_only_in_queue) as
#   cmake -DSOURCE_DIR=<repository root> -P check_queue_keys.cmake

# The allowed exceptions, "file|line regex" (no ';': it would split the
# list): the start-up wiring, kept to these two lines of member::
# add_key_spaces, which Member::open calls before the state opens (and an
# offline restore before it rebuilds the plug-ins' records), and main's
# dispatch of `etcdq queue ...`, the queues' client tool (queue/ctl.h).
set(ALLOWED
  "src/member/member.cc|^#include \"queue/key_space.h\"$"
  "src/member/member.cc|^  queue::add_key_space\\(\\).$"
  "src/cli/main.cc|^#include \"queue/ctl.h\"$"
  "src/cli/main.cc|^  if \\(argc >= 2 && std::string_view\\(argv\\[1\\]\\) == \"queue\"\\) return queue::ctl_main\\(argc - 1, argv \\+ 1\\);$")

include(${CMAKE_CURRENT_LIST_DIR}/line_scan.cmake)

set(PATTERN "/q/|queue::|#[ \t]*include[ \t]*\"queue/")
file(GLOB_RECURSE files ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cc)
set(found "")
set(used_allowances "")
line_scan(found ROOT ${SOURCE_DIR} FILES ${files} MATCH "${PATTERN}" SKIP_PATHS "^src/queue/"
          ALLOW ${ALLOWED} USED_ALLOWANCES used_allowances)
set(failures "")
foreach(f IN LISTS found)
  list(APPEND failures "names the queues outside src/queue/: ${f}")
endforeach()
# The probe itself: the pattern must catch what it is meant to.
foreach(sample "  if (key.starts_with(\"/q/\")) {" "  queue::Book* b;" "#include \"queue/keys.h\"")
  if(NOT sample MATCHES "${PATTERN}")
    list(APPEND failures "the pattern misses: ${sample}")
  endif()
endforeach()
if(failures)
  string(JOIN "\n" text ${failures})
  message(FATAL_ERROR "${text}")
endif()
list(LENGTH files count)
message(STATUS "ok: ${count} files; queue names only in src/queue/ and the wiring (${used_allowances})")
