# Proves that RocksDB stays inside the storage layer: no file of src/ outside
# src/storage/ (nor a unit test) includes a RocksDB header or names a
# RocksDB type; they use storage/'s API (iterator.h, batch.h, snapshot.h,
# engine.h). Also no source includes a header by a "../" path, which would
# step around the per-layer include roots (CMakeLists.txt, etcdq_layer).
#
# Run by ctest (layers.rocksdb_only_in_storage) as
#   cmake -DSOURCE_DIR=<repository root> -P check_rocksdb.cmake

file(GLOB_RECURSE files
  ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cc
  ${SOURCE_DIR}/tests/unit/*.h ${SOURCE_DIR}/tests/unit/*.cc
  ${SOURCE_DIR}/fuzz/*.h ${SOURCE_DIR}/fuzz/*.cc)
set(failures "")
foreach(f ${files})
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
  file(STRINGS ${f} lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(NOT rel MATCHES "^src/storage/" AND line MATCHES "rocksdb::|[<\"]rocksdb/")
      list(APPEND failures "${rel}:${n}: RocksDB outside src/storage: ${line}")
    endif()
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]\\.\\./")
      list(APPEND failures "${rel}:${n}: include by a ../ path: ${line}")
    endif()
  endforeach()
endforeach()
if(failures)
  string(JOIN "\n" text ${failures})
  message(FATAL_ERROR "${text}")
endif()
list(LENGTH files count)
message(STATUS "ok: ${count} files, RocksDB only in src/storage/")
