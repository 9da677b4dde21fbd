# Proves that the build enforces DESIGN.md's layers: a source file of a lower
# layer, compiled with exactly that layer's include directories, can include
# its own headers and those of the layers below it, and fails to compile when
# it includes a header of a layer above it (or beside it).
#
# Run by ctest (layers.upward_include_fails), as
#   cmake -DCXX=<compiler> -DWORK_DIR=<dir> -DINC_<layer>=<dir>|<dir>... -P check_layers.cmake
# where INC_<layer> is $<TARGET_PROPERTY:etcdq_<layer>,INCLUDE_DIRECTORIES>.
# No network; only -fsyntax-only compiles of one-line probes.

# layer | a header it may include | headers it must not include
set(CASES
  "common|common/error.h|storage/engine.h,mvcc/store.h"
  "bbolt|common/error.h|storage/engine.h,mvcc/store.h"
  "storage|common/error.h|mvcc/store.h,apply/applier.h"
  "mvcc|storage/engine.h|lease/lessor.h,keyspace/kind.h,queue/book.h,apply/applier.h"
  "lease|mvcc/store.h|queue/book.h,apply/applier.h"
  "keyspace|mvcc/store.h|queue/book.h,auth/store.h,apply/applier.h"
  "queue|keyspace/kind.h|lease/lessor.h,auth/store.h,apply/applier.h"
  "auth|keyspace/registry.h|queue/keys.h,lease/lessor.h,apply/applier.h"
  "apply|keyspace/registry.h|queue/book.h,consensus/node.h,server/server.h"
  "etcd_snapshot|bbolt/reader.h|member/identity.h,server/context.h,apply/applier.h,queue/book.h"
  "consensus|common/error.h|apply/applier.h,keyspace/registry.h,queue/book.h,storage/engine.h,mvcc/store.h,member/member.h,server/server.h,http/server.h"
  "member|consensus/node.h|server/server.h,http/server.h,host/host.h,cli/flags.h"
  "http|common/error.h|mvcc/store.h,server/server.h"
  "server|member/member.h|host/host.h,http/server.h,cli/flags.h"
  "host|server/server.h|cli/flags.h")

file(MAKE_DIRECTORY ${WORK_DIR})
set(failures "")

function(probe layer header out_ok out_log)
  string(REPLACE "|" ";" incs "${INC_${layer}}")
  set(flags "")
  foreach(d ${incs})
    list(APPEND flags "-I${d}")
  endforeach()
  string(MAKE_C_IDENTIFIER "${layer}_${header}" id)
  set(src ${WORK_DIR}/${id}.cc)
  file(WRITE ${src} "// A file of the ${layer} layer.\n#include \"${header}\"\n")
  execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only ${flags} ${src}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    set(${out_ok} TRUE PARENT_SCOPE)
  else()
    set(${out_ok} FALSE PARENT_SCOPE)
  endif()
  set(${out_log} "${out}${err}" PARENT_SCOPE)
endfunction()

foreach(c ${CASES})
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 layer)
  list(GET parts 1 allowed)
  list(GET parts 2 forbidden)
  if(NOT DEFINED INC_${layer} OR INC_${layer} STREQUAL "")
    list(APPEND failures "no include directories given for layer ${layer}")
    continue()
  endif()
  # The control: a header the layer may use compiles, so a failure below is
  # the layering and not a broken probe.
  probe(${layer} ${allowed} ok log)
  if(ok)
    message(STATUS "ok: ${layer} may include ${allowed}")
  else()
    list(APPEND failures "${layer} cannot include ${allowed}, which it may use:\n${log}")
  endif()
  string(REPLACE "," ";" forbidden "${forbidden}")
  foreach(h ${forbidden})
    probe(${layer} ${h} ok log)
    string(REGEX MATCH "${h}[:']* (No such file or directory|file not found)" missing "${log}")
    if(ok)
      list(APPEND failures "${layer} includes ${h} (an upper layer) and it compiles")
    elseif(NOT missing)
      list(APPEND failures "${layer} including ${h} failed, but not because the header is out of reach:\n${log}")
    else()
      message(STATUS "ok: ${layer} including ${h} fails to compile")
    endif()
  endforeach()
endforeach()

if(failures)
  string(JOIN "\n" text ${failures})
  message(FATAL_ERROR "layer enforcement broken:\n${text}")
endif()
