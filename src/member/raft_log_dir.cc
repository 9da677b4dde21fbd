#include "member/raft_log_dir.h"

#include <filesystem>
#include <fstream>

#include "raft/node.h"

namespace etcdq::member {

namespace fs = std::filesystem;

namespace {

std::string absolute_path(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::weakly_canonical(fs::absolute(p), ec);
  return (ec ? fs::absolute(p) : a).lexically_normal().string();
}

}  // namespace

Error choose_raft_log_dir(const std::string& data_dir, const std::string& wal_dir, std::string* dir) {
  const fs::path member = fs::path(data_dir) / "member";
  const std::string default_dir = absolute_path((member / "raft").string());
  const fs::path record = member / "wal-dir";
  std::string recorded;
  {
    std::ifstream in(record);
    std::getline(in, recorded);
  }
  if (wal_dir.empty()) {
    if (!recorded.empty()) {
      return {Code::kInvalidArgument, "data dir " + data_dir + " keeps its Raft log in " + recorded +
                                          " (--wal-dir " + recorded + " at an earlier start; see " + record.string() +
                                          "): start with --wal-dir " + recorded};
    }
    *dir = (member / "raft").string();
    return {};
  }
  const std::string wanted = absolute_path(wal_dir);
  const std::string current = recorded.empty() ? default_dir : recorded;
  if (wanted != current && !raft::log_exists(wanted) && raft::log_exists(current)) {
    return {Code::kInvalidArgument, "--wal-dir " + wal_dir + " holds no Raft log, but data dir " + data_dir +
                                        " keeps its log in " + current + ": move the files from there to " + wanted +
                                        (recorded.empty() ? " or start without --wal-dir" : " or give --wal-dir " + current)};
  }
  if (wanted != recorded) {
    std::error_code ec;
    fs::create_directories(member, ec);
    fs::path tmp = record;
    tmp += ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << wanted << "\n";
      out.flush();
      if (!out) return {Code::kInternal, "cannot write " + tmp.string()};
    }
    fs::rename(tmp, record, ec);
    if (ec) return {Code::kInternal, "cannot write " + record.string() + ": " + ec.message()};
  }
  *dir = wanted;
  return {};
}

}  // namespace etcdq::member
