#include "proxy/http/hand_over.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/plan/request_plan.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/store/task_store.hpp"

#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace rebound::http {
namespace {

/// RFC 7240: `Prefer` holds comma-separated preferences; respond-async is one token of them.
bool prefers_async(const request_message<bhttp::buffer_body>& req) {
  auto const [first, last] = req.equal_range(bhttp::field::prefer);
  for (auto f = first; f != last; ++f) {
    std::string_view v = f->value();
    while (!v.empty()) {
      auto const comma = v.find(',');
      auto item = v.substr(0, comma);
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      auto const end = item.find_first_of(" \t;=");
      if (beast::iequals(item.substr(0, end), "respond-async")) return true;
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  return false;
}

/** The head as the delivery will send it: the request as forwarded (hop-by-hop fields gone,
    Via added), minus the framing, which the delivery sets for the stored body, and minus
    Prefer, which asked rebound, not the upstream. */
std::vector<std::pair<std::string, std::string>> stored_head(const request_message<bhttp::buffer_body>& req) {
  std::vector<std::pair<std::string, std::string>> head;
  for (auto const& f : req) {
    auto const name = f.name();
    if (name == bhttp::field::content_length || name == bhttp::field::transfer_encoding ||
        name == bhttp::field::prefer || name == bhttp::field::expect)
      continue;
    head.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  return head;
}

net::awaitable<bool> send_accepted(beast::tcp_stream& client, const runtime::session_context& ctx,
                                   const std::string& id, bool keep_alive, std::chrono::milliseconds idle) {
  bhttp::response<bhttp::string_body> res{bhttp::status::accepted, 11};
  res.set(bhttp::field::content_type, "application/json");
  res.set(bhttp::field::location, std::string(ctx.admin_base) + "/retry-tasks/" + id);
  res.set("Preference-Applied", "respond-async");
  res.set(bhttp::field::via, "1.1 rebound");
  std::string body;
  observe::json_writer(body).open_object().field("task_id", id).field("status", "PENDING").close_object();
  res.body() = std::move(body += '\n');
  res.keep_alive(keep_alive);
  res.prepare_payload();
  client.expires_after(idle);
  auto [ec, n] = co_await bhttp::async_write(client, res, use_tuple);
  co_return !ec && keep_alive;
}

}  // namespace

bool wants_hand_over(const runtime::session_context& ctx, const request_parser& parser, const retry::policy& policy,
                     bool upgrade) {
  // A route that may not dead-letter never hands over: what its delivery gave up on would be
  // lost. RFC 7240 lets it answer a respond-async preference synchronously.
  if (!ctx.store || !policy.dead_letter) return false;
  // A handshake cannot wait in a store: forward.cpp relays it, or refuses it on a route whose
  // calls are handed over.
  if (upgrade) return false;
  return retry::hands_over_calls(policy.context) || prefers_async(parser.get());
}

net::awaitable<bool> hand_over(const client_request& r) {
  auto const& ctx = r.ctx;
  auto& client = r.client;
  auto& parser = r.parser;
  auto const& target = r.target;
  auto const& route = r.route;
  auto& req = parser.get();
  auto const idle = ctx.cfg().limits.idle_timeout;
  auto const max_body = ctx.cfg().async.max_body;
  bool const keep = req.keep_alive();
  // Arguments by reference: GCC 12 destroys by-value arguments of a co_awaited call twice.
  auto refuse = [&](const error_reply& refusal, bool keep_after) -> net::awaitable<bool> {
    error_reply reply = refusal;
    reply.dependency = route.name;
    route.guard->answered(reply.status);
    co_await send_error(client, reply, keep_after, idle);
    co_return keep_after;
  };

  if (auto const unmet = unmet_expectation(req)) co_return co_await refuse(*unmet, false);
  // The one request plan (plan/request_plan.hpp): a delivery goes again after any failure, so
  // it always carries a key: the app's, else one made now and stored with the task.
  auto const& key_header = route.policy->idempotency.header;
  plan::request_plan planned;
  auto const method = std::string_view(req.method_string().data(), req.method_string().size());
  plan::request_in const in{plan::door::hand_over,           route, target, req.method(), method, *ctx.rng,
                            std::chrono::steady_clock::now()};
  if (auto const refusal = plan::plan_request(planned, plan::fields_view(req.base()), in))
    // The request's own key refused: the connection may go on once its body is read; no key
    // rebound could make: it closes.
    co_return co_await refuse(*refusal, refusal->status < 500 && parser.is_done() && keep);
  plan::edits_of(planned, key_header, [&req](std::string_view name, std::string_view value) { req.set(name, value); });
  std::string body;
  auto const got = co_await take_whole_body(r, body, max_body);
  if (got.how == whole_body::end::client_gone) co_return false;
  if (got.how == whole_body::end::refused) co_return co_await refuse(*got.problem, false);
  if (got.how == whole_body::end::too_large) {
    error_reply const big{413, error_type::bad_request, "body larger than async.max_body: nothing was stored", {}, 0};
    co_return co_await refuse(big, false);
  }
  prepare_upstream_request(req, parser, target, ctx.instance_token);
  auto made =
      store::new_task({route.name, std::string(req.method_string()), "http://" + target.authority + target.origin_form,
                       stored_head(req), std::move(body), std::string(), key_header, planned.key});
  if (!made) {
    error_reply const none{503, error_type::store_unavailable, "no task id could be generated", {}, 0};
    co_return co_await refuse(none, false);
  }
  auto const id = made->id;
  auto task = std::move(*made);
  auto [failed, stored] = co_await store::async_accept(*ctx.store, std::move(task), use_tuple);
  if (failed && failed->full) {
    if (failed->first) ctx.log->warn("store_full", {{"dependency", route.name}, {"message", failed->message}});
    error_reply const full{507, error_type::store_full,   "the call was not stored: " + failed->message, {},
                           0,   store::full_retry_after_s};
    co_return co_await refuse(full, keep);
  }
  if (failed || !stored) {
    std::string const why = failed ? failed->message : "not stored";
    // A store that is down logged so once itself; each call it refuses meanwhile is counted
    // (proxy_requests_total 503), not logged again. A failure it did not explain is.
    if (!ctx.store->unavailable()) ctx.log->error("store_unavailable", {{"dependency", route.name}, {"message", why}});
    error_reply const down{503, error_type::store_unavailable, "the call could not be stored: " + why, {}, 0, 1};
    co_return co_await refuse(down, keep);
  }
  route.guard->answered(202);
  ctx.log->info("task_accepted", {{"task_id", id},
                                  {"dependency", route.name},
                                  {"method", std::string_view(req.method_string())},
                                  {"path", plan::path_of(target.origin_form)},
                                  {"idempotency_key", planned.key}});
  co_return co_await send_accepted(client, ctx, id, keep && !ctx.sessions->draining(), idle);
}

}  // namespace rebound::http
