// A proposal's answer as the response its request expects: the one
// propose-then-unwrap of every service that writes (KV, Lease, Alarm, Auth
// management, the Lock and Election recipes).
//
// Thread-safety: any thread; `done` runs once, with an admission error on
// the calling thread, else where consensus::Node answers (member/pipeline.h).
#pragma once

#include <functional>
#include <type_traits>
#include <utility>
#include <variant>

#include "apply/result.h"
#include "member/context.h"
#include "member/pipeline.h"

namespace etcdq::member {

template <class Resp>
struct Answer {
  Error error;    // the pipeline's or apply's, etcd's code and message
  Resp response;  // on success: apply's response, header filled (Context::fill_header)
  // Compact(physical=true): the revision physical compaction must reach
  // before the call is answered (mvcc/compactor.h when_finished); 0: none.
  int64_t wait_compaction = 0;
};

namespace internal {
template <class T, class V>
struct InVariant;
template <class T, class... Ts>
struct InVariant<T, std::variant<Ts...>> : std::bool_constant<(std::is_same_v<T, Ts> || ...)> {};
}  // namespace internal

// Proposes `cmd` through the pipeline. Commands whose apply answers a
// response (apply/result.h) hand it over; an apply result of another type
// is a bug, answered errors::internal("apply returned the wrong response").
// Commands that apply answers with nothing (auth management) get an empty
// Resp. Either way the header is filled on success.
template <class Resp>
void propose_for(Context& ctx, apply::Command cmd, std::function<void(Answer<Resp>&&)> done) {
  Context* c = &ctx;
  propose(ctx, std::move(cmd), [c, done = std::move(done)](apply::Result&& r) {
    Answer<Resp> a;
    a.error = r.error;
    a.wait_compaction = r.wait_compaction;
    if (!a.error) {
      if constexpr (internal::InVariant<Resp, decltype(r.response)>::value) {
        if (auto* out = std::get_if<Resp>(&r.response)) {
          a.response.Swap(out);
        } else {
          a.error = errors::internal("apply returned the wrong response");
        }
      }
      if (!a.error) c->fill_header(a.response.mutable_header());
    }
    done(std::move(a));
  });
}

}  // namespace etcdq::member
