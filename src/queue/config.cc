#include "queue/config.h"

#include <nlohmann/json.hpp>

namespace etcdq::queue {

Error parse_config(std::string_view json, Config* out) {
  auto bad = [](const std::string& why) { return Error{Code::kInvalidArgument, "etcdq: invalid queue config: " + why}; };
  nlohmann::json j = nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not JSON");
  if (!j.is_object()) return bad("not a JSON object");
  Config c;
  for (const auto& [name, v] : j.items()) {
    if (name == "visibility_timeout") {
      if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 86400) {
        return bad("visibility_timeout must be seconds in (0, 86400]");
      }
      c.visibility_ms = std::max<int64_t>(1, static_cast<int64_t>(v.get<double>() * 1000));
    } else if (name == "max_deliveries" || name == "max_in_flight") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1000000) {
        return bad(name + " must be an integer in [1, 1000000]");
      }
      (name == "max_deliveries" ? c.max_deliveries : c.max_in_flight) = static_cast<uint32_t>(v.get<int64_t>());
    } else {
      return bad("unknown field \"" + name + "\"");
    }
  }
  *out = c;
  return {};
}

}  // namespace etcdq::queue
