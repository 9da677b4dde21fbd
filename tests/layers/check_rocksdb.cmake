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
include(${CMAKE_CURRENT_LIST_DIR}/line_scan.cmake)
set(found "")
line_scan(found ROOT ${SOURCE_DIR} FILES ${files} MATCH "rocksdb::|[<\"]rocksdb/" SKIP_PATHS "^src/storage/")
set(failures "")
foreach(f IN LISTS found)
  list(APPEND failures "RocksDB outside src/storage: ${f}")
endforeach()
set(found "")
line_scan(found ROOT ${SOURCE_DIR} FILES ${files} MATCH "^[ \t]*#[ \t]*include[ \t]*[<\"]\\.\\./")
foreach(f IN LISTS found)
  list(APPEND failures "include by a ../ path: ${f}")
endforeach()
if(failures)
  string(JOIN "\n" text ${failures})
  message(FATAL_ERROR "${text}")
endif()
list(LENGTH files count)
message(STATUS "ok: ${count} files, RocksDB only in src/storage/")
