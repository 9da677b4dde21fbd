#include "auth/range_perms.h"

#include <algorithm>

namespace etcdq::auth {
namespace {

bool from_key(std::string_view range_end) { return range_end.size() == 1 && range_end[0] == '\0'; }

}  // namespace

bool valid_permission_range(std::string_view key, std::string_view range_end) {
  if (range_end.empty() || from_key(range_end)) return true;
  return key < range_end;
}

RangePerms::RangePerms(const std::vector<const authpb::Role*>& roles) {
  for (const authpb::Role* r : roles) {
    for (const authpb::Permission& p : r->keypermission()) {
      if (p.permtype() == authpb::Permission::READ || p.permtype() == authpb::Permission::READWRITE) add(&read_, p);
      if (p.permtype() == authpb::Permission::WRITE || p.permtype() == authpb::Permission::READWRITE) {
        add(&write_, p);
      }
    }
  }
  merge(&read_);
  merge(&write_);
}

void RangePerms::add(std::vector<Interval>* set, const authpb::Permission& p) {
  Interval i;
  i.begin = p.key();
  if (p.range_end().empty()) {
    i.end = p.key() + std::string(1, '\0');
  } else if (from_key(p.range_end())) {
    i.to_end = true;
  } else {
    if (p.range_end() <= p.key()) return;  // empty: grants nothing
    i.end = p.range_end();
  }
  set->push_back(std::move(i));
}

void RangePerms::merge(std::vector<Interval>* set) {
  std::sort(set->begin(), set->end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (Interval& i : *set) {
    if (!out.empty()) {
      Interval& last = out.back();
      // Overlapping or adjacent: [a, b) and [b, c) cover [a, c).
      if (last.to_end || i.begin <= last.end) {
        if (!last.to_end) {
          if (i.to_end) {
            last.to_end = true;
            last.end.clear();
          } else if (i.end > last.end) {
            last.end = std::move(i.end);
          }
        }
        continue;
      }
    }
    out.push_back(std::move(i));
  }
  *set = std::move(out);
}

bool RangePerms::covers(const std::vector<Interval>& set, const Interval& want) {
  // The last merged interval starting at or before want.begin is the only
  // one that can cover it (they are disjoint and not adjacent).
  auto it = std::upper_bound(set.begin(), set.end(), want.begin,
                             [](const std::string& k, const Interval& i) { return k < i.begin; });
  if (it == set.begin()) return false;
  const Interval& i = *std::prev(it);
  if (i.to_end) return true;
  if (want.to_end) return false;
  return want.end <= i.end;
}

bool RangePerms::permits(std::string_view key, std::string_view range_end, Access a) const {
  Interval want;
  want.begin = std::string(key);
  if (range_end.empty()) {
    want.end = want.begin + std::string(1, '\0');
  } else if (from_key(range_end)) {
    want.to_end = true;
  } else {
    // An empty interval reads nothing; etcd's interval tree still asks for
    // it to lie inside a grant, and so do we: [key, key) needs key.
    want.end = std::max(std::string(range_end), want.begin + std::string(1, '\0'));
  }
  return covers(a == Access::kRead ? read_ : write_, want);
}

}  // namespace etcdq::auth
