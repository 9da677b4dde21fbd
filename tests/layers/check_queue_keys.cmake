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
# offline restore before it rebuilds the plug-ins' records).
set(ALLOWED
  "src/member/member.cc|^#include \"queue/key_space.h\"$"
  "src/member/member.cc|^  queue::add_key_space\\(\\).$")

file(GLOB_RECURSE files ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cc)
set(failures "")
set(used_allowances "")
foreach(f ${files})
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
  if(rel MATCHES "^src/queue/")
    continue()
  endif()
  file(STRINGS ${f} lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(NOT line MATCHES "/q/|queue::|#[ \t]*include[ \t]*\"queue/")
      continue()
    endif()
    set(allowed FALSE)
    foreach(a ${ALLOWED})
      string(FIND "${a}" "|" bar)
      string(SUBSTRING "${a}" 0 ${bar} afile)
      math(EXPR from "${bar} + 1")
      string(SUBSTRING "${a}" ${from} -1 aline)
      if(rel STREQUAL afile AND line MATCHES "${aline}")
        set(allowed TRUE)
        list(APPEND used_allowances "${a}")
      endif()
    endforeach()
    if(NOT allowed)
      list(APPEND failures "${rel}:${n}: names the queues outside src/queue/: ${line}")
    endif()
  endforeach()
endforeach()
# The probe itself: the pattern must catch what it is meant to.
foreach(sample "  if (key.starts_with(\"/q/\")) {" "  queue::Book* b;" "#include \"queue/keys.h\"")
  if(NOT sample MATCHES "/q/|queue::|#[ \t]*include[ \t]*\"queue/")
    list(APPEND failures "the pattern misses: ${sample}")
  endif()
endforeach()
if(failures)
  string(JOIN "\n" text ${failures})
  message(FATAL_ERROR "${text}")
endif()
list(LENGTH files count)
list(REMOVE_DUPLICATES used_allowances)
message(STATUS "ok: ${count} files; queue names only in src/queue/ and the wiring (${used_allowances})")
