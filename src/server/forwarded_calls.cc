#include "server/forwarded_calls.h"

namespace etcdq::server {

Error check_forwarded_revision(const Context& ctx, const auth::Caller& who) {
  if (ctx.auth == nullptr || !ctx.auth->enabled()) return {};
  if (who.user.empty() || who.revision == 0) return errors::user_empty();
  if (who.revision < ctx.auth->revision()) return errors::auth_old_revision();
  return {};
}

}  // namespace etcdq::server
