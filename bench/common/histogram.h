// Latency histograms for the load generators (etcdq_loadgen, etcdq_watch_bench).
//
// Histogram: log-linear buckets over uint64 values (the callers store
// nanoseconds), < 1 % relative error, exact max. add() is O(1); quantile()
// walks the ~7k buckets. Not thread-safe: keep one per thread and merge()
// them once the threads are done.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace bench {

class Histogram {
 public:
  static constexpr int kSubBits = 7;
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = (64 - kSubBits + 1) * kSub;

  Histogram() : b_(kBuckets, 0) {}
  void add(uint64_t v) {
    ++b_[index(v)];
    ++n_;
    max_ = std::max(max_, v);
    sum_ += v;
  }
  void merge(const Histogram& o) {
    for (int i = 0; i < kBuckets; ++i) b_[i] += o.b_[i];
    n_ += o.n_;
    max_ = std::max(max_, o.max_);
    sum_ += o.sum_;
  }
  uint64_t count() const { return n_; }
  uint64_t max() const { return max_; }
  double mean() const { return n_ ? static_cast<double>(sum_) / static_cast<double>(n_) : 0.0; }
  // Nearest-rank quantile, q in [0, 1]; 0 when empty.
  uint64_t quantile(double q) const {
    if (n_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(n_) + 0.999999);
    return rank_value(std::clamp<uint64_t>(rank, 1, n_), false);
  }
  // The value of the rank-th smallest sample (1-based), or the rank-th
  // largest when `descending` (for the magnitudes of negative delays).
  uint64_t rank_value(uint64_t rank, bool descending) const {
    uint64_t seen = 0;
    for (int k = 0; k < kBuckets; ++k) {
      int i = descending ? kBuckets - 1 - k : k;
      seen += b_[i];
      if (seen >= rank) return std::min(mid(i), max_);
    }
    return max_;
  }

 private:
  static int index(uint64_t v) {
    if (v < kSub) return static_cast<int>(v);
    int e = 63 - __builtin_clzll(v);
    return (e - kSubBits + 1) * kSub + static_cast<int>((v >> (e - kSubBits)) & (kSub - 1));
  }
  static uint64_t mid(int i) {
    if (i < kSub) return i;
    int e = i / kSub + kSubBits - 1;
    uint64_t lo = static_cast<uint64_t>(kSub + i % kSub) << (e - kSubBits);
    return lo + ((uint64_t{1} << (e - kSubBits)) >> 1);
  }
  std::vector<uint64_t> b_;
  uint64_t n_ = 0, max_ = 0, sum_ = 0;
};

// Signed delays: magnitudes of negative ones in `neg`, the rest in `pos`.
struct SignedHistogram {
  Histogram neg, pos;
  void add(int64_t v) {
    if (v < 0)
      neg.add(static_cast<uint64_t>(-v));
    else
      pos.add(static_cast<uint64_t>(v));
  }
  void merge(const SignedHistogram& o) {
    neg.merge(o.neg);
    pos.merge(o.pos);
  }
  uint64_t count() const { return neg.count() + pos.count(); }
  int64_t quantile(double q) const {
    uint64_t n = count();
    if (n == 0) return 0;
    uint64_t rank = std::clamp<uint64_t>(static_cast<uint64_t>(q * static_cast<double>(n) + 0.999999), 1, n);
    if (rank <= neg.count()) return -static_cast<int64_t>(neg.rank_value(rank, true));
    return static_cast<int64_t>(pos.rank_value(rank - neg.count(), false));
  }
  int64_t max() const { return pos.count() ? static_cast<int64_t>(pos.max()) : quantile(1.0); }
};

}  // namespace bench
