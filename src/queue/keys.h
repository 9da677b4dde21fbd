// The queue key grammar of QUEUES.md, parsed in one place.
//
//   /q/{queue}/p/{tail}                       produce (also producer, i, input)
//   /q/{queue}/c/{consumer}                   a consumer: Watch it (also consumer)
//   /q/{queue}/c/{consumer}/{idx}/{tail}      ack, consumer-scoped (Delete)
//   /q/{queue}/{idx}/{tail}                   a message; Delete acks it
//   /q/{queue}/config                         the queue's settings (JSON Put)
//
// `/queue/` means the same as `/q/`. {queue} and {consumer} are one
// non-empty path segment; {tail} is non-empty and may hold '/'; {idx} is
// exactly 20 decimal digits, so byte order is FIFO order. Messages are
// stored under `/q/` whatever prefix their producer used.
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace etcdq::queue {

enum class KeyKind {
  kPlain,      // not under /q/ or /queue/: an ordinary etcd key
  kProduce,
  kConsumer,   // /q/{queue}/c/{consumer}
  kConsumerAck,
  kMessage,
  kConfig,
  kMalformed,  // under /q/ or /queue/ but none of the above
};

struct Key {
  KeyKind kind = KeyKind::kPlain;
  std::string_view queue;
  std::string_view consumer;  // kConsumer, kConsumerAck
  std::string_view tail;      // kProduce, kMessage, kConsumerAck
  uint64_t idx = 0;           // kMessage, kConsumerAck
};

// The views point into `key`.
Key parse(std::string_view key);

// True for keys under /q/ or /queue/.
bool in_queue_space(std::string_view key);

constexpr int kIdxDigits = 20;
// "/q/{queue}/{idx, 20 digits}/{tail}"
std::string message_key(std::string_view queue, uint64_t idx, std::string_view tail);
// "/q/{queue}/": the queue's messages, config and consumers.
std::string queue_prefix(std::string_view queue);
// The range holding exactly the queue's messages, as [begin, end).
std::string messages_begin(std::string_view queue, uint64_t from_idx);
std::string messages_end(std::string_view queue);
std::string config_key(std::string_view queue);

// A Delete names the key at /q/: a consumer-scoped ack becomes the message
// key, and /queue/ keys (and /queue/ ranges) become /q/ ones.
void canonicalize_delete(std::string* key, std::string* range_end);

// A Range or plain Watch under /queue/ reads /q/, where messages live
// (both prefixes are the same, QUEUES.md): `key` and a `range_end` that is
// empty or also under /queue/ are rewritten.
void canonicalize_read(std::string* key, std::string* range_end);

// The dead-letter queue of `queue`.
std::string dead_letter_queue(std::string_view queue);
// A `ch:{table}` queue feeds ClickHouse table {table}: true, and the table.
// Its dead-letter queue (`ch:{table}.dlq`) is an ordinary queue.
bool clickhouse_table(std::string_view queue, std::string_view* table);

// A consumer Watch: the exact consumer key, or it (or it plus '/') as a
// prefix (`range_end` = its prefix end). Fills `out` and returns true.
bool consumer_watch(std::string_view key, std::string_view range_end, Key* out);

}  // namespace etcdq::queue
