# Proves DESIGN.md's "server/ translates between gRPC and member only": no
# file of src/server/ includes a header of a layer below member/ (mvcc/,
# apply/, consensus/, lease/, storage/, queue/, keyspace/, auth/, bbolt/,
# etcd_snapshot/); the services use member/'s calls (member/kv.h,
# leases.h, watches.h, maintenance.h, auth.h, reads.h, cluster.h,
# leader.h, pipeline.h, answers.h), common/, net/ and the generated
# protocol messages.
#
# The build cannot prove it yet: member/'s public headers (member/context.h
# first) still include those layers, so whatever member/ sees, server/ sees
# (issue #35, item 1). This reads the sources instead.
#
# Run by ctest (layers.server_only_member) as
#   cmake -DSOURCE_DIR=<repository root> -P check_server_includes.cmake

include(${CMAKE_CURRENT_LIST_DIR}/line_scan.cmake)

set(BELOW_MEMBER "mvcc|apply|consensus|lease|storage|queue|keyspace|auth|bbolt|etcd_snapshot")
set(PATTERN "^[ \t]*#[ \t]*include[ \t]*[<\"](${BELOW_MEMBER})/")

file(GLOB_RECURSE files ${SOURCE_DIR}/src/server/*.h ${SOURCE_DIR}/src/server/*.cc)
set(found "")
line_scan(found ROOT ${SOURCE_DIR} FILES ${files} MATCH "${PATTERN}" ONLY_PATHS "^src/server/")
set(failures "")
foreach(f IN LISTS found)
  list(APPEND failures "server/ includes a layer below member/: ${f}")
endforeach()
# The probe itself: it catches what it is meant to, and lets through what
# server/ may include.
foreach(sample "#include \"mvcc/watch_hub.h\"" "#include \"apply/validate.h\"" "  #  include <consensus/forwarder.h>"
               "#include \"lease/lessor.h\"" "#include \"auth/request_checks.h\"" "#include \"etcd_snapshot/writer.h\"")
  if(NOT sample MATCHES "${PATTERN}")
    list(APPEND failures "the pattern misses: ${sample}")
  endif()
endforeach()
foreach(sample "#include \"member/kv.h\"" "#include \"etcd/api/etcdserverpb/rpc.pb.h\"" "#include \"etcdq/command.pb.h\""
               "#include \"common/error.h\"" "#include \"net/tls_pump.h\"" "// mvcc/watch_hub.h says why")
  if(sample MATCHES "${PATTERN}")
    list(APPEND failures "the pattern refuses what server/ may include: ${sample}")
  endif()
endforeach()
list(LENGTH files count)
if(count EQUAL 0)
  list(APPEND failures "no file found under ${SOURCE_DIR}/src/server")
endif()
if(failures)
  string(JOIN "\n" text ${failures})
  message(FATAL_ERROR "${text}")
endif()
message(STATUS "ok: ${count} files of src/server/ include nothing below member/")
