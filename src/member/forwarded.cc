#include "member/forwarded.h"

#include "apply/command_check.h"
#include "member/pipeline.h"

namespace etcdq::member {

Error admit_forwarded(Context& ctx, const std::string& framed, apply::Command* cmd) {
  if (Error e = apply::decode_forwarded(framed, cmd)) return e;
  return admit(ctx, *cmd, Source::kForwarded);
}

}  // namespace etcdq::member
