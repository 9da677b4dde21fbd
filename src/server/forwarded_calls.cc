#include "server/forwarded_calls.h"

namespace etcdq::server {

Error check_forwarded_revision(const Context& ctx, const member::Caller& who) {
  if (!member::auth_enabled(ctx)) return {};
  if (who.user.empty() || who.revision == 0) return errors::user_empty();
  if (who.revision < member::auth_revision(ctx)) return errors::auth_old_revision();
  return {};
}

}  // namespace etcdq::server
