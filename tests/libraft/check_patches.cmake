# Proves that the libraft the build links is one the patches in
# src/consensus/libraft_patches.cc fit (libraft_patches.h says why each needs
# this): Debian's libraft-dev 0.15.0, and in its libraft.a each wrapped
# function is defined in the object the patch names and called from another
# object (ld's --wrap redirects only references between objects: a call
# inside the defining object, or a function that moved or was inlined, would
# silently bypass the patch).
#
# Run by ctest (libraft.patches_fit), as
#   cmake -DNM=<nm> -DLIB=<libraft.a> -DVERSION=<pkg-config version> -P check_patches.cmake

if(NOT VERSION STREQUAL "0.15.0")
  message(FATAL_ERROR "libraft ${VERSION}: the patches in src/consensus/libraft_patches.cc fit 0.15.0 only; "
                      "re-read each against the new source before changing this check")
endif()
execute_process(COMMAND ${NM} -A ${LIB} RESULT_VARIABLE rc OUTPUT_VARIABLE syms ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -A ${LIB} failed: ${err}")
endif()

# symbol | object that defines it ("-": outside libraft) | an object that calls it
set(CASES
  "progressToProbe|progress.o|replication.o"
  "posix_fallocate|-|uv_os.o"
  "UvFsProbeCapabilities|uv_fs.o|uv.o"
  "UvWriterSubmit|uv_writer.o|uv_append.o"
  "uv_queue_work|-|uv_writer.o"
  "progressToSnapshot|progress.o|replication.o"
  "progressMaybeDecrement|progress.o|replication.o"
  "progressShouldReplicate|progress.o|replication.o"
  "progressMarkRecentRecv|progress.o|replication.o"
  "byteCrc32|byte.o|uv_encoding.o"
  "byteCrc32|byte.o|uv_segment.o"
  "byteCrc32|byte.o|uv_snapshot.o")

set(failures "")
foreach(c ${CASES})
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 sym)
  list(GET parts 1 def)
  list(GET parts 2 caller)
  # nm -A lines: "<lib>:<object>: <address> T <symbol>" or "<lib>:<object>:  U <symbol>".
  if(def STREQUAL "-")
    if(syms MATCHES ":[^:\n]+: *[0-9a-f]* [TW] ${sym}\n")
      list(APPEND failures "${sym} is defined inside libraft.a: its calls would not reach the patch")
    endif()
  elseif(NOT syms MATCHES "[:-]${def}: *[0-9a-f]+ T ${sym}\n")
    list(APPEND failures "${sym} is not defined in libraft's ${def}")
  endif()
  if(NOT syms MATCHES "[:-]${caller}: +U ${sym}\n")
    list(APPEND failures "libraft's ${caller} does not call ${sym} (from another object)")
  endif()
endforeach()

# 9. send_commit_now calls libraft's replicationHeartbeat (replication.c)
# itself: it must be a global function there.
if(NOT syms MATCHES "[:-]replication.o: *[0-9a-f]+ T replicationHeartbeat\n")
  list(APPEND failures "replicationHeartbeat is not a global function of libraft's replication.o")
endif()

# 10. HeardCommit calls libraft's logTermOf (log.c), replicationApply and
# replicationInstallSnapshotBusy (replication.c) itself.
foreach(c "logTermOf|log.o" "replicationApply|replication.o" "replicationInstallSnapshotBusy|replication.o")
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 sym)
  list(GET parts 1 def)
  if(NOT syms MATCHES "[:-]${def}: *[0-9a-f]+ T ${sym}\n")
    list(APPEND failures "${sym} is not a global function of libraft's ${def}")
  endif()
endforeach()

if(failures)
  string(REPLACE ";" "\n  " text "${failures}")
  message(FATAL_ERROR "the libraft patches do not fit ${LIB}:\n  ${text}")
endif()
message(STATUS "libraft ${VERSION} at ${LIB}: every patched function is where the patches expect it")
