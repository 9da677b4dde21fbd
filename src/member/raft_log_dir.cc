#include "member/raft_log_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "consensus/node.h"

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
  if (wanted != current && !consensus::log_exists(wanted) && consensus::log_exists(current)) {
    return {Code::kInvalidArgument, "--wal-dir " + wal_dir + " holds no Raft log, but data dir " + data_dir +
                                        " keeps its log in " + current + ": move the files from there to " + wanted +
                                        (recorded.empty() ? " or start without --wal-dir" : " or give --wal-dir " + current)};
  }
  if (wanted != recorded) {
    std::error_code ec;
    fs::create_directories(member, ec);
    // Durable before the log is written there: a crash must not leave a
    // log in --wal-dir that the data dir does not point to.
    fs::path tmp = record;
    tmp += ".tmp";
    std::string text = wanted + "\n";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
    if (fd >= 0) ::close(fd);
    if (!ok) return {Code::kInternal, "cannot write " + tmp.string()};
    fs::rename(tmp, record, ec);
    if (ec) return {Code::kInternal, "cannot write " + record.string() + ": " + ec.message()};
    if (int dir = ::open(member.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  *dir = wanted;
  return {};
}

}  // namespace etcdq::member
