#include "proxy/admin/task_api.hpp"

#include "config/config.hpp"
#include "proxy/admin/api_support.hpp"
#include "proxy/admin/task_submission.hpp"
#include "proxy/auth/secret_file.hpp"
#include "proxy/plan/locate.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/idempotency/key.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/store/task_store.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <optional>

namespace rebound::admin {
namespace {

using namespace api;

constexpr std::string_view tasks_prefix = "/retry-tasks/";
constexpr std::string_view policies_prefix = "/retry-policies/";
constexpr std::string_view dlq_path = "/dlq";

using observe::iso8601;

// Arguments by reference: GCC 12 destroys by-value arguments of a co_awaited call twice.

void write_attempt(observe::json_writer& w, const store::attempt_log& at) {
  w.open_object().field("number", at.number).field("at", at.at).field("status", at.status);
  w.field("error_type", at.error_type).field("duration_ms", at.duration.count() / 1000).close_object();
}

/// GET /retry-tasks/{id}: the task and its first attempts (all of them: /attempts pages on).
net::awaitable<response> get_task(const answers& a, store::task_queue& store, const std::string& id) {
  auto [e, task] = co_await store::async_get(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!task) co_return a.error(bhttp::status::not_found, "not_found", "no such task");
  auto [ae, attempts] = co_await store::async_attempts(store, id, 0, max_page, use_tuple);
  if (ae) co_return a.unavailable(*ae);
  std::string body;
  observe::json_writer w(body);
  w.open_object();
  task_fields(w, *task);
  if (!task->policy_id.empty()) w.field("policy_id", task->policy_id);
  w.key("attempt_log").open_array();
  for (auto const& at : attempts) write_attempt(w, at);
  w.close_array().close_object();
  co_return a.json(bhttp::status::ok, std::move(body += '\n'));
}

/// GET /retry-tasks/{id}/attempts[?after=N][&limit=N]: the attempt log a page at a time.
net::awaitable<response> list_attempts(const answers& a, store::task_queue& store, const std::string& id,
                                       std::string_view target) {
  auto const limit = page_limit(query_value(target, "limit"), 100);
  unsigned after = 0;
  auto const after_text = query_value(target, "after");
  if (!after_text.empty()) {
    auto [p, ec] = std::from_chars(after_text.data(), after_text.data() + after_text.size(), after);
    if (ec != std::errc() || p != after_text.data() + after_text.size())
      co_return a.error(bhttp::status::bad_request, "bad_request", "after must be an attempt number");
  }
  if (!limit) co_return a.error(bhttp::status::bad_request, "bad_request", "limit must be 1 to 500");
  auto [e, task] = co_await store::async_get(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!task) co_return a.error(bhttp::status::not_found, "not_found", "no such task");
  auto [ae, attempts] = co_await store::async_attempts(store, id, after, *limit, use_tuple);
  if (ae) co_return a.unavailable(*ae);
  std::string body;
  observe::json_writer w(body);
  w.open_object().key("items").open_array();
  for (auto const& at : attempts) write_attempt(w, at);
  w.close_array().key("next");
  if (attempts.size() == *limit)
    w.value(attempts.back().number);
  else
    w.null();
  w.close_object();
  co_return a.json(bhttp::status::ok, std::move(body += '\n'));
}

/// DELETE /retry-tasks/{id}: cancels a task still waiting; one in flight or ended is a conflict.
net::awaitable<response> cancel_task(const answers& a, store::task_queue& store, const std::string& id) {
  auto const now = store::wall_clock::now();
  auto [e, cancelled] = co_await store::async_cancel(store, id, now, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (cancelled) {
    std::string body;
    observe::json_writer(body).open_object().field("id", id).field("status", "CANCELLED").close_object();
    co_return a.json(bhttp::status::ok, std::move(body += '\n'));
  }
  auto [ge, task] = co_await store::async_get(store, id, use_tuple);
  if (!task) co_return a.error(bhttp::status::not_found, "not_found", "no such task");
  co_return a.error(bhttp::status::conflict, "not_pending",
                    "only a PENDING task can be cancelled; this one is " + std::string(store::to_string(task->status)));
}

/** POST /retry-tasks: a task submitted through the API (seed 001), stored as a handed-over
    call would be and delivered by the same scheduler. JSON: target (an absolute http:// URL),
    method (POST), headers (an object of strings), body (a string), policy_id, idempotency_key
    (else one is made). Answers 201 with the task id once it is committed. */
net::awaitable<response> submit_task(const answers& a, const task_api_context& ctx, const std::string& text) {
  auto read = read_task_submission(text, ctx.cfg.async.max_body, ctx.cfg.limits.max_request_head);
  if (auto const* refused = std::get_if<submission_error>(&read))
    co_return a.error(refused->status, refused->type, refused->message);
  auto& sub = std::get<task_submission>(read);
  auto const& target = sub.target;
  auto const absolute = "http://" + target.authority + target.origin_form;
  // Located as the proxy port locates a request (plan/locate.hpp): a task for a host
  // `unknown_hosts: deny` refuses is refused, and so is one aimed at rebound's own proxy
  // port, which every delivery would send back to itself.
  plan::located where;
  plan::locate(where, {sub.method, sub.url, "", 0, 11, false}, plan::listener::proxy, ctx.cfg);
  if (auto const& refused = where.refusal)
    co_return a.error(static_cast<bhttp::status>(refused->status), to_string(refused->type), refused->message);
  auto const& route = where.route;

  std::string policy_id;
  if (auto const& p = sub.policy_id) {
    auto [pe, policy] = co_await store::async_get_policy(ctx.policies, *p, use_tuple);
    if (pe) co_return a.unavailable(*pe);
    if (!policy)
      co_return a.error(bhttp::status::unprocessable_entity, "unknown_policy",
                        "no policy registered as \"" + *p + "\"");
    policy_id = *p;
  }
  auto const& key_header = route.policy->idempotency.header;
  std::vector<std::pair<std::string, std::string>> head;
  head.emplace_back("Host", target.authority);
  for (auto& [name, value] : sub.headers) {
    if (reserved_field(name) || beast::iequals(name, key_header)) continue;  // rebound writes these
    head.emplace_back(std::move(name), std::move(value));
  }
  // The submission's key was checked as it was read (task_submission.cpp); a task always
  // carries one.
  auto key = sub.idempotency_key ? sub.idempotency_key : idempotency::new_key();
  auto made = key ? store::new_task({route.name, sub.method, absolute, std::move(head), std::move(sub.body),
                                     std::move(policy_id), key_header, std::move(*key)})
                  : std::nullopt;
  if (!made) co_return a.error(bhttp::status::service_unavailable, "store_unavailable", "no id could be generated");
  auto& t = *made;
  auto [e, stored] = co_await store::async_accept(ctx.tasks, t, use_tuple);
  if (e && e->full && e->first)
    ctx.log.warn("store_full", {{"dependency", t.dependency}, {"message", e->message}, {"via", "admin_api"}});
  if (e || !stored) co_return a.unavailable(e.value_or(store::store_error{"not stored"}));
  ctx.log.info("task_accepted", {{"task_id", t.id},
                                 {"dependency", t.dependency},
                                 {"method", t.method},
                                 {"path", plan::path_of(target.origin_form)},
                                 {"idempotency_key", t.idempotency_key},
                                 {"via", "admin_api"}});
  std::string body;
  observe::json_writer(body)
      .open_object()
      .field("task_id", t.id)
      .field("status", "PENDING")
      .field("dependency", t.dependency)
      .field("idempotency_key", t.idempotency_key)
      .close_object();
  auto res = a.json(bhttp::status::created, std::move(body += '\n'));
  res.set(bhttp::field::location, std::string(ctx.admin_base) + std::string(tasks_prefix) + t.id);
  co_return res;
}

/// The token file's content without surrounding whitespace; nullopt when unreadable or empty.
std::optional<std::string> read_token(const std::string& path) {
  auto read = auth::read_secret_file(path);
  if (!read.value || read.value->empty()) return std::nullopt;
  return std::move(read.value);
}

/// In time independent of where the two differ: the token is a secret.
bool bearer_matches(const http::request_message<bhttp::string_body>& req, const std::string& token) {
  auto const it = req.find(bhttp::field::authorization);
  if (it == req.end()) return false;
  std::string_view v = it->value();
  if (v.size() < 7 || !beast::iequals(v.substr(0, 7), "Bearer ")) return false;
  v.remove_prefix(7);
  if (v.size() != token.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < v.size(); ++i) diff |= static_cast<unsigned char>(v[i] ^ token[i]);
  return diff == 0;
}

}  // namespace

bool is_task_api(const http::request_message<bhttp::string_body>& req) {
  std::string_view const t = req.target();
  auto const path = t.substr(0, t.find('?'));
  return path == "/retry-tasks" || path.starts_with(tasks_prefix) || path == "/retry-policies" ||
         path.starts_with(policies_prefix) || path == dlq_path || path.starts_with("/dlq/");
}

std::optional<response> refuse_unauthorized(const http::request_message<bhttp::string_body>& req, const config::config& cfg) {
  auto const method = req.method();
  bool const read = method == bhttp::verb::get || method == bhttp::verb::head;
  auto const& token_file = cfg.admin_token_file;
  if (read) return std::nullopt;
  answers const a(req);
  // Host and Origin were checked before (host_guard.hpp, the first thing the admin port does).
  if (token_file.empty()) return std::nullopt;
  auto const token = read_token(token_file);
  if (!token) return a.error(bhttp::status::service_unavailable, "unavailable", "admin.token_file cannot be read");
  if (bearer_matches(req, *token)) return std::nullopt;
  auto res = a.error(bhttp::status::unauthorized, "unauthorized", "writes need Authorization: Bearer <admin token>");
  res.set(bhttp::field::www_authenticate, "Bearer realm=\"rebound-admin\"");
  return res;
}

net::awaitable<response> task_api_answer(const http::request_message<bhttp::string_body>& req, const task_api_context& ctx) {
  answers const a(req);
  std::string_view const target = req.target();
  std::string_view const path = target.substr(0, target.find('?'));
  auto const method = req.method();
  bool const read = method == bhttp::verb::get || method == bhttp::verb::head;
  if (auto refused = refuse_unauthorized(req, ctx.cfg)) co_return std::move(*refused);
  auto not_allowed = [&](std::string_view allow) {
    auto res = a.error(bhttp::status::method_not_allowed, "bad_request", std::string(allow) + " only");
    res.set(bhttp::field::allow, allow);
    return res;
  };
  // The segments after a prefix: {id} or {id}/{action}; ids hold no '/'.
  auto split = [](std::string_view rest) {
    auto const slash = rest.find('/');
    return std::pair<std::string, std::string>(
        std::string(rest.substr(0, slash)),
        slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1)));
  };
  if (path == "/retry-tasks") {
    if (method == bhttp::verb::post) co_return co_await submit_task(a, ctx, req.body());
    co_return not_allowed("POST");
  }
  if (path.starts_with(tasks_prefix)) {
    auto const [id, action] = split(path.substr(tasks_prefix.size()));
    if (id.empty() || (!action.empty() && action != "attempts"))
      co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
    if (action == "attempts") {
      if (read) co_return co_await list_attempts(a, ctx.tasks, id, target);
      co_return not_allowed("GET");
    }
    if (read) co_return co_await get_task(a, ctx.tasks, id);
    if (method == bhttp::verb::delete_) co_return co_await cancel_task(a, ctx.tasks, id);
    co_return not_allowed("GET, DELETE");
  }
  if (path == "/retry-policies") {
    if (method == bhttp::verb::post) co_return co_await register_policy(a, ctx, req.body());
    co_return not_allowed("POST");
  }
  if (path.starts_with(policies_prefix)) {
    auto const [id, action] = split(path.substr(policies_prefix.size()));
    if (id.empty() || !action.empty()) co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
    if (read) co_return co_await get_policy(a, ctx.policies, id);
    co_return not_allowed("GET");
  }
  if (path == dlq_path) {
    if (read) co_return co_await list_dlq(a, ctx.tasks, target);
    co_return not_allowed("GET");
  }
  if (path == "/dlq/replay") {
    if (method == bhttp::verb::post) co_return co_await replay_matching(a, ctx, req.body());
    co_return not_allowed("POST");
  }
  if (path.starts_with("/dlq/")) {
    auto const [id, action] = split(path.substr(5));
    if (id.empty() || (!action.empty() && action != "replay"))
      co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
    if (action == "replay") {
      if (method == bhttp::verb::post) co_return co_await replay(a, ctx, id);
      co_return not_allowed("POST");
    }
    if (method == bhttp::verb::delete_) co_return co_await delete_dead_letter(a, ctx, id);
    co_return not_allowed("DELETE");
  }
  co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
}

}  // namespace rebound::admin