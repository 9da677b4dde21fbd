// Fuzzes the checks a client request passes before it is proposed
// (apply/validate.h), on whatever bytes a client can send: the first byte
// picks the request type, the rest is parsed as that message the way gRPC
// parses it (protobuf's default nesting limit of 100).
//
// Invariants: no check crashes or loops; a request that passes has a key;
// a txn that passes stays within --max-txn-ops on each branch.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <google/protobuf/stubs/logging.h>
#include "apply/validate.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "keyspace/registry.h"
#include "member/member.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" per input
  etcdq::member::add_key_spaces();            // the queues' put rules, as in etcdq
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      etcdserverpb::RangeRequest r;
      if (!r.ParseFromArray(body.data(), static_cast<int>(body.size()))) return 0;
      if (!etcdq::apply::validate_range(r)) check(!r.key().empty());
      break;
    }
    case 1: {
      etcdserverpb::PutRequest r;
      if (!r.ParseFromArray(body.data(), static_cast<int>(body.size()))) return 0;
      if (!etcdq::apply::validate_put(r)) check(!r.key().empty());
      etcdq::keyspace::validate_put(r);
      break;
    }
    case 2: {
      etcdserverpb::DeleteRangeRequest r;
      if (!r.ParseFromArray(body.data(), static_cast<int>(body.size()))) return 0;
      if (!etcdq::apply::validate_delete_range(r)) check(!r.key().empty());
      break;
    }
    default: {
      etcdserverpb::TxnRequest r;
      if (!r.ParseFromArray(body.data(), static_cast<int>(body.size()))) return 0;
      // A small --max-txn-ops too, so the fuzzer reaches its edge.
      int64_t max_ops = (data[0] & 4) ? 128 : 4;
      if (!etcdq::apply::validate_txn(r, max_ops)) {
        check(r.success_size() <= max_ops && r.failure_size() <= max_ops && r.compare_size() <= max_ops);
      }
      etcdq::apply::txn_is_read_only(r);
      break;
    }
  }
  return 0;
}
