// Checks the bytes a peer sends on a Raft stream (consensus/transport.h) against
// libraft 0.15's wire format before libraft reads them. libraft's receiver
// (uv_recv.c, uv_encoding.c) trusts its framing: a header shorter than its
// entry count implies, a configuration without its terminator or entry
// lengths that do not add up to the payload make it read past its buffers
// (a 56-byte AppendEntries claiming one entry and carrying no entry header
// crashed a member). Each message is
//   preamble: u64 type, u64 header length (little endian);
//   header:   by type, sized exactly as libraft 0.15's encoder sizes it;
//   payload:  AppendEntries: the entries' data, each a multiple of 8 bytes
//             (libraft steps over padding that the length does not count);
//             InstallSnapshot: the snapshot data.
// Only framing is checked (sizes, counts, entry types, the configuration's
// encoding), and that the term is below kMaxTerm; what the other fields
// mean (indexes) is Raft's business.
//
// Not thread-safe: one WireCheck per stream, fed in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace etcdq::consensus {

class WireCheck {
public:
  // Entries one AppendEntries may carry. libraft 0.15 sends every entry
  // from the follower's next index to its last (replication.c has no cap),
  // and keeps at most --snapshot-count plus 2048 trailing entries in memory;
  // this allows etcd's default (100000) many times over.
  static constexpr uint64_t kMaxEntries = 1 << 20;
  // One entry: etcdq packs proposals into entries of up to 4 MiB
  // (Node::kMaxEntryBytes); a single command may exceed that up to
  // --max-request-bytes, which etcd advises to keep under 10 MiB.
  static constexpr uint64_t kMaxEntryBytes = 64 << 20;
  // A whole message (header and payload): what one stream may make libraft
  // allocate. Legitimate AppendEntries above this (a follower far behind on
  // large entries) are refused; the leader then keeps retrying until a
  // snapshot replaces them.
  static constexpr uint64_t kMaxMessageBytes = 1ull << 30;
  // An InstallSnapshot's data: etcdq's snapshots carry metadata only
  // (consensus::SnapshotMeta, well under 1 KiB); the state moves by
  // Peer.FetchSnapshot.
  static constexpr uint64_t kMaxSnapshotDataBytes = 1 << 20;
  // An InstallSnapshot's configuration: members' ids, peer addresses, roles.
  static constexpr uint64_t kMaxConfigurationBytes = 1 << 20;
  // The term every message starts with. A term near 2^64 taken from a
  // forged message leaves the cluster no next term (an election would wrap
  // it), so every member stalls for good; 2^48 elections are ~9000 years
  // of one election a millisecond.
  static constexpr uint64_t kMaxTerm = 1ull << 48;

  // Feeds the next bytes of the stream. True while everything fed so far
  // is a well-formed prefix of a sequence of messages; false from the first
  // malformed byte on (error() says what), and on every later call. A
  // caller that hands libraft each chunk only after feed accepted it never
  // gives libraft a complete header (or configuration entry) that failed
  // the check: libraft decodes one only once all of it arrived.
  bool feed(std::string_view bytes);
  // Why feed returned false ("" while it has not).
  const std::string &error() const { return error_; }
  // Complete messages seen.
  uint64_t messages() const { return messages_; }
  // Bytes held to be checked whole (a preamble, a header, a configuration
  // entry): at most an AppendEntries header of kMaxEntries (48 bytes and
  // 16 an entry) or an InstallSnapshot's (56 and kMaxConfigurationBytes).
  size_t buffered() const { return buf_.size(); }

private:
  bool fail(std::string why);
  bool check_preamble();
  bool check_header();
  bool check_append_entries();
  bool check_install_snapshot();

  enum class Stage { kPreamble, kHeader, kPayload };
  struct Entry {
    uint8_t type;
    uint32_t len;
  };
  Stage stage_ = Stage::kPreamble;
  // The preamble, then the header, then a configuration entry, as they arrive.
  std::string buf_;
  std::vector<Entry> entries_; // the current AppendEntries' entries
  size_t next_entry_ = 0;      // the entry whose data arrives now
  uint64_t entry_done_ = 0;    // bytes of it seen
  uint64_t type_ = 0;
  uint64_t header_bytes_ = 0;
  uint64_t payload_left_ = 0;
  uint64_t messages_ = 0;
  std::string error_;
};

} // namespace etcdq::consensus
