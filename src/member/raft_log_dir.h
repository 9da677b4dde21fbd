// Where a member's Raft log lives: <data-dir>/member/raft, or the
// directory etcd's --wal-dir names (etcd's dedicated WAL directory: the
// log's files directly in it, e.g. on a faster disk).
//
// The data dir records the --wal-dir it was started with
// (<data-dir>/member/wal-dir, one absolute path), so a later start that
// would open an empty log fails instead, naming the directory to give:
//   - no --wal-dir, but one is recorded;
//   - a --wal-dir that holds no log while the data dir's log is elsewhere
//     (the recorded directory, or <data-dir>/member/raft).
// (etcd 3.6 starts in both cases: a new, empty WAL under the old state,
// whose writes then time out. Failing is the clearer answer.) A --wal-dir
// that holds a log is taken as moved there, and recorded.
#pragma once

#include <string>

#include "common/error.h"

namespace etcdq::member {

// Sets *dir to the Raft log's directory for this start (and records
// `wal_dir` in the data dir when it is given). Errors: InvalidArgument as
// above, or the record cannot be written (Internal, naming the file).
Error choose_raft_log_dir(const std::string& data_dir, const std::string& wal_dir, std::string* dir);

}  // namespace etcdq::member
