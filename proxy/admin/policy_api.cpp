// POST /retry-policies and GET /retry-policies/{id}: policies registered for async delivery,
// read and checked by the loader itself, so the API refuses what `rebound check` refuses.
#include "config/describe.hpp"
#include "config/load.hpp"
#include "proxy/admin/api_support.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/observe/log.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>

namespace rebound::admin::api {
namespace {

/// A registered policy's id: what may stand in a URL path unescaped, and never rebound's own `rebound:` ids.
bool valid_policy_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

}  // namespace

/** POST /retry-policies: `{"id": ..., <policy keys as in the YAML>}`, read and checked by the
    loader's own rules (what R-1 forbids is refused with its rule id). Idempotent by id: the
    same policy again is 200, a different one under a taken id 409. */
net::awaitable<response> register_policy(const answers& a, const task_api_context& ctx, const std::string& text) {
  boost::system::error_code jec;
  auto doc = boost::json::parse(text, jec);
  if (jec || !doc.is_object())
    co_return a.error(bhttp::status::bad_request, "bad_request", "the body must be a JSON object");
  auto& o = doc.as_object();
  auto const* idv = o.if_contains("id");
  if (!idv || !idv->is_string() || !valid_policy_id(idv->as_string()))
    co_return a.error(bhttp::status::bad_request, "bad_request",
                      "id must be 1 to 128 letters, digits, '.', '_' or '-'");
  std::string const id(idv->as_string());
  o.erase("id");
  std::string const spec = boost::json::serialize(o);
  std::optional<retry::policy> policy;
  try {
    policy = config::load_policy_text(spec, "policy");
  } catch (const config::config_error& x) {
    std::string body;
    observe::json_writer w(body);
    w.open_object().key("error").open_object().field("type", "invalid_policy").field("message", x.what());
    w.close_object().key("findings").open_array();
    for (auto const& d : x.diagnostics()) {
      if (d.warning) continue;
      w.open_object().field("key", d.path.starts_with("defaults.") ? d.path.substr(9) : d.path);
      w.field("message", d.message).key("rule");
      if (d.rule.empty())
        w.null();
      else
        w.value(d.rule);
      w.close_object();
    }
    w.close_array().close_object();
    co_return a.json(bhttp::status::unprocessable_entity, std::move(body += '\n'));
  }
  store::stored_policy const stored{id, spec, store::wall_clock::now()};
  auto [e, put] = co_await store::async_put_policy(ctx.policies, stored, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (put == store::policy_put::conflict)
    co_return a.error(bhttp::status::conflict, "policy_exists", "another policy is registered as \"" + id + "\"");
  ctx.log.info("policy_registered", {{"policy_id", id}, {"new", put == store::policy_put::created}});
  std::string body;
  observe::json_writer(body)
      .open_object()
      .field("id", id)
      .key("policy")
      .raw(config::policy_json(*policy))
      .close_object();
  body += '\n';
  auto res = a.json(put == store::policy_put::created ? bhttp::status::created : bhttp::status::ok, std::move(body));
  res.set(bhttp::field::location, std::string(ctx.admin_base) + "/retry-policies/" + id);
  co_return res;
}

/// GET /retry-policies/{id}: the policy resolved (every key, built-ins filled in) and as registered.
net::awaitable<response> get_policy(const answers& a, store::policy_registry& store, const std::string& id) {
  auto [e, stored] = co_await store::async_get_policy(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!stored) co_return a.error(bhttp::status::not_found, "not_found", "no such policy");
  std::string body;
  observe::json_writer w(body);
  // The spec as registered: JSON this API serialized itself when it was put.
  w.open_object().field("id", stored->id).field("created_at", stored->created_at).key("registered").raw(stored->spec);
  w.key("policy");
  try {
    w.raw(config::policy_json(config::load_policy_text(stored->spec, "policy " + id)));
  } catch (const std::exception&) {
    w.null();  // a rule of this rebound refuses it: delivery uses the route's
  }
  w.close_object();
  co_return a.json(bhttp::status::ok, std::move(body += '\n'));
}

}  // namespace rebound::admin::api
