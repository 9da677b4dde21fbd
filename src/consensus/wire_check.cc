#include "consensus/wire_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace etcdq::consensus {
namespace {

// libraft 0.15's message types (raft.h's RAFT_IO_*) and entry types.
constexpr uint64_t kAppendEntries = 1, kAppendEntriesResult = 2,
                   kRequestVote = 3, kRequestVoteResult = 4,
                   kInstallSnapshot = 5, kTimeoutNow = 6;
constexpr uint8_t kCommand = 1, kBarrier = 2, kChange = 3;
constexpr size_t kPreambleBytes = 16;
// AppendEntries: term, prev index, prev term, commit, entry count, then 16
// bytes an entry; the encoder sizes the header 8 bytes larger than it
// writes (a "leader id" it never fills), and so does InstallSnapshot's.
constexpr uint64_t kAppendEntriesFixed = 48;
constexpr uint64_t kEntryHeaderBytes = 16;
constexpr size_t kEntriesAt = 40;
// InstallSnapshot: term, last index, last term, configuration index,
// configuration length, configuration, data length (+ the unused 8 bytes).
constexpr uint64_t kInstallSnapshotFixed = 56;
constexpr size_t kConfigurationAt = 40;

uint64_t get64(const std::string &b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = v << 8 | static_cast<uint8_t>(b[at + static_cast<size_t>(i)]);
  return v;
}

uint32_t get32(const std::string &b, size_t at) {
  return static_cast<uint32_t>(get64(b, at) & 0xffffffffu);
}

// libraft's configuration encoding (configuration.c): format byte 1, u64
// server count, then per server u64 id, NUL-terminated address, role byte.
// configurationDecode bounds only the address scan; everything else must
// be checked here. "" when well formed.
std::string check_configuration(std::string_view c) {
  if (c.size() < 9)
    return "configuration shorter than its count";
  if (static_cast<uint8_t>(c[0]) != 1)
    return "unknown configuration format";
  uint64_t n = 0;
  for (int i = 8; i >= 1; --i)
    n = n << 8 | static_cast<uint8_t>(c[static_cast<size_t>(i)]);
  size_t at = 9;
  for (uint64_t i = 0; i < n; ++i) {
    if (c.size() - at < 8)
      return "configuration server without an id";
    uint64_t id = 0;
    for (int k = 7; k >= 0; --k)
      id = id << 8 | static_cast<uint8_t>(c[at + static_cast<size_t>(k)]);
    if (id == 0)
      return "configuration server with id 0";
    at += 8;
    size_t nul = c.find('\0', at);
    if (nul == std::string_view::npos)
      return "configuration address without its terminator";
    at = nul + 1;
    if (at >= c.size())
      return "configuration server without a role";
    uint8_t role = static_cast<uint8_t>(c[at++]);
    if (role > 2)
      return "configuration server with an unknown role";
  }
  return "";
}

} // namespace

bool WireCheck::fail(std::string why) {
  if (error_.empty())
    error_ = std::move(why);
  return false;
}

bool WireCheck::check_preamble() {
  type_ = get64(buf_, 0);
  header_bytes_ = get64(buf_, 8);
  uint64_t want_min = 0, want_max = 0;
  switch (type_) {
  case kAppendEntries:
    want_min = kAppendEntriesFixed;
    want_max = kAppendEntriesFixed + kEntryHeaderBytes * kMaxEntries;
    break;
  case kAppendEntriesResult:
  case kTimeoutNow:
    want_min = want_max = 24;
    break;
  case kRequestVote: // without and with the flags word
    want_min = 32;
    want_max = 40;
    break;
  case kRequestVoteResult:
    want_min = 16;
    want_max = 24;
    break;
  case kInstallSnapshot:
    want_min = kInstallSnapshotFixed + 9;
    want_max = kInstallSnapshotFixed + kMaxConfigurationBytes;
    break;
  default:
    return fail(fmt::format("unknown message type {}", type_));
  }
  if (header_bytes_ < want_min || header_bytes_ > want_max) {
    return fail(fmt::format("message type {} with a {}-byte header", type_,
                            header_bytes_));
  }
  if ((type_ == kRequestVote || type_ == kRequestVoteResult) &&
      header_bytes_ != want_min && header_bytes_ != want_max) {
    return fail(fmt::format("message type {} with a {}-byte header", type_,
                            header_bytes_));
  }
  return true;
}

bool WireCheck::check_append_entries() {
  uint64_t n = get64(buf_, 32);
  if (n > kMaxEntries ||
      header_bytes_ != kAppendEntriesFixed + kEntryHeaderBytes * n) {
    return fail(fmt::format("AppendEntries with {} entries in a {}-byte header",
                            n, header_bytes_));
  }
  uint64_t payload = 0;
  entries_.clear();
  for (uint64_t i = 0; i < n; ++i) {
    size_t at = kEntriesAt + static_cast<size_t>(i * kEntryHeaderBytes);
    uint8_t type = static_cast<uint8_t>(buf_[at + 8]);
    uint32_t len = get32(buf_, at + 12);
    if (type != kCommand && type != kBarrier && type != kChange) {
      return fail(
          fmt::format("AppendEntries entry {} of unknown type {}", i, type));
    }
    // libraft steps from entry to entry over padding to 8 bytes that the
    // payload length does not count, and leaves an empty entry's data
    // unset when the whole payload is empty: only 8-byte multiples add up.
    if (len == 0 || len % 8 != 0 || len > kMaxEntryBytes) {
      return fail(fmt::format("AppendEntries entry {} of {} bytes", i, len));
    }
    if (type == kChange && len > kMaxConfigurationBytes) {
      return fail(fmt::format(
          "AppendEntries configuration entry {} of {} bytes", i, len));
    }
    payload += len;
    if (header_bytes_ + payload > kMaxMessageBytes) {
      return fail(
          fmt::format("AppendEntries of more than {} bytes", kMaxMessageBytes));
    }
    entries_.push_back(Entry{type, len});
  }
  payload_left_ = payload;
  return true;
}

bool WireCheck::check_install_snapshot() {
  uint64_t conf_bytes = get64(buf_, 32);
  if (conf_bytes > kMaxConfigurationBytes ||
      header_bytes_ != kInstallSnapshotFixed + conf_bytes) {
    return fail(fmt::format(
        "InstallSnapshot with a {}-byte configuration in a {}-byte header",
        conf_bytes, header_bytes_));
  }
  std::string why = check_configuration(
      std::string_view(buf_).substr(kConfigurationAt, conf_bytes));
  if (!why.empty())
    return fail("InstallSnapshot " + why);
  uint64_t data = get64(buf_, kConfigurationAt + conf_bytes);
  if (data > kMaxSnapshotDataBytes)
    return fail(fmt::format("InstallSnapshot with {} bytes of data", data));
  payload_left_ = data;
  return true;
}

bool WireCheck::check_header() {
  payload_left_ = 0;
  entries_.clear();
  // Every libraft 0.15 header starts with the sender's term.
  if (uint64_t term = get64(buf_, 0); term >= kMaxTerm)
    return fail(fmt::format("message type {} with term {}", type_, term));
  if (type_ == kAppendEntries)
    return check_append_entries();
  if (type_ == kInstallSnapshot)
    return check_install_snapshot();
  return true;
}

bool WireCheck::feed(std::string_view bytes) {
  if (!error_.empty())
    return false;
  while (!bytes.empty()) {
    if (stage_ == Stage::kPayload) {
      // AppendEntries: configuration entries are buffered and decoded as
      // libraft's membership code will; other data is only counted.
      while (!bytes.empty() && next_entry_ < entries_.size()) {
        Entry &e = entries_[next_entry_];
        size_t take = static_cast<size_t>(
            std::min<uint64_t>(bytes.size(), e.len - entry_done_));
        if (e.type == kChange)
          buf_.append(bytes.data(), take);
        bytes.remove_prefix(take);
        entry_done_ += take;
        payload_left_ -= take;
        if (entry_done_ < e.len)
          break;
        if (e.type == kChange) {
          std::string why = check_configuration(buf_);
          if (!why.empty())
            return fail(
                fmt::format("AppendEntries entry {}: {}", next_entry_, why));
          buf_.clear();
        }
        ++next_entry_;
        entry_done_ = 0;
      }
      if (entries_.empty()) { // InstallSnapshot's data
        size_t take = static_cast<size_t>(
            std::min<uint64_t>(bytes.size(), payload_left_));
        bytes.remove_prefix(take);
        payload_left_ -= take;
      }
      if (payload_left_ == 0) {
        ++messages_;
        stage_ = Stage::kPreamble;
        buf_.clear();
      }
      continue;
    }
    size_t want = stage_ == Stage::kPreamble
                      ? kPreambleBytes
                      : static_cast<size_t>(header_bytes_);
    size_t take = std::min(bytes.size(), want - buf_.size());
    buf_.append(bytes.data(), take);
    bytes.remove_prefix(take);
    if (buf_.size() < want)
      break;
    if (stage_ == Stage::kPreamble) {
      if (!check_preamble())
        return false;
      stage_ = Stage::kHeader;
      buf_.clear();
      continue;
    }
    if (!check_header())
      return false;
    buf_.clear();
    next_entry_ = 0;
    entry_done_ = 0;
    if (payload_left_ == 0) {
      ++messages_;
      stage_ = Stage::kPreamble;
    } else {
      stage_ = Stage::kPayload;
    }
  }
  return true;
}

} // namespace etcdq::consensus
