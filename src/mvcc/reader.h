// A consistent source of the MVCC column families: a published read view
// (store.h) or the apply thread's uncommitted writes on top of the database
// (writer.h). Range logic (range.h) is written once against this.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "storage/engine.h"
#include "storage/iterator.h"

namespace etcdq::mvcc {

class Reader {
 public:
  virtual ~Reader() = default;
  virtual storage::Iterator iterator(storage::Cf cf) const = 0;
  // True and `value` set when `key` exists in `cf`.
  virtual bool get(storage::Cf cf, std::string_view key, std::string* value) const = 0;
};

}  // namespace etcdq::mvcc
