// The dead letters on the admin API: listed by dependency and time, replayed one by one
// or by filter, deleted once someone has dealt with them.
#include "proxy/admin/api_support.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/observe/log.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

namespace rebound::admin::api {
namespace {

/// The dead-letter filter of a query string (GET /dlq) or a JSON body (POST /dlq/replay).
std::optional<std::string> read_filter(store::task_filter& f, std::string_view dependency, std::string_view since,
                                       std::string_view until) {
  f.dependency = std::string(dependency);
  if (!since.empty() && !(f.since = parse_time(since))) return "since must be an RFC 3339 UTC time";
  if (!until.empty() && !(f.until = parse_time(until))) return "until must be an RFC 3339 UTC time";
  return std::nullopt;
}

void log_replayed(const task_api_context& ctx, const std::string& id, std::string_view how) {
  ctx.log.info("task_replayed", {{"task_id", id}, {"how", how}});
}

}  // namespace

/// GET /dlq[?dependency=NAME][&since=T][&until=T][&after=ID][&limit=N]: dead letters by id, a page at a time.
net::awaitable<response> list_dlq(const answers& a, store::task_queue& store, std::string_view target) {
  store::task_filter filter;
  auto const limit = page_limit(query_value(target, "limit"), 100);
  if (!limit) co_return a.error(bhttp::status::bad_request, "bad_request", "limit must be 1 to 500");
  filter.limit = *limit;
  filter.after = query_value(target, "after");
  if (auto problem = read_filter(filter, query_value(target, "dependency"), query_value(target, "since"),
                                 query_value(target, "until")))
    co_return a.error(bhttp::status::bad_request, "bad_request", *problem);
  auto [e, tasks] = co_await store::async_list(store, filter, use_tuple);
  if (e) co_return a.unavailable(*e);
  std::string body;
  observe::json_writer w(body);
  w.open_object().key("items").open_array();
  for (auto const& t : tasks) {
    w.open_object();
    task_fields(w, t);
    w.field("dead_lettered_at", t.next_attempt_at).close_object();
  }
  w.close_array().key("next");
  if (tasks.size() == filter.limit)
    w.value(tasks.back().id);
  else
    w.null();
  w.close_object();
  co_return a.json(bhttp::status::ok, std::move(body += '\n'));
}

/// POST /dlq/{id}/replay: the dead letter is delivered again, with its key, in a fresh window.
net::awaitable<response> replay(const answers& a, const task_api_context& ctx, const std::string& id) {
  auto [e, replayed] = co_await store::async_replay(ctx.tasks, id, store::wall_clock::now(), use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!replayed) co_return a.error(bhttp::status::not_found, "not_found", "no dead letter with this id");
  log_replayed(ctx, id, "one");
  std::string body;
  observe::json_writer(body).open_object().field("id", id).field("status", "PENDING").close_object();
  co_return a.json(bhttp::status::accepted, std::move(body += '\n'));
}

/** POST /dlq/replay: the dead letters of a filter (`{"dependency", "since", "until",
    "limit"}`, every field optional) replayed, up to `limit` (100, at most 500) a call; `more`
    says a next call has more to take. */
net::awaitable<response> replay_matching(const answers& a, const task_api_context& ctx, const std::string& text) {
  boost::system::error_code jec;
  auto const doc = boost::json::parse(text.empty() ? std::string("{}") : text, jec);
  if (jec || !doc.is_object())
    co_return a.error(bhttp::status::bad_request, "bad_request", "the body must be a JSON object");
  auto const& o = doc.as_object();
  auto str = [&](std::string_view k) -> std::string_view {
    auto const* v = o.if_contains(k);
    return v && v->is_string() ? std::string_view(v->as_string()) : std::string_view();
  };
  store::task_filter filter;
  if (auto problem = read_filter(filter, str("dependency"), str("since"), str("until")))
    co_return a.error(bhttp::status::bad_request, "bad_request", *problem);
  filter.limit = 100;
  if (auto const* l = o.if_contains("limit")) {
    if (!l->is_int64() || l->as_int64() < 1 || l->as_int64() > static_cast<std::int64_t>(max_page))
      co_return a.error(bhttp::status::bad_request, "bad_request", "limit must be 1 to 500");
    filter.limit = static_cast<std::size_t>(l->as_int64());
  }
  auto [e, ids] = co_await store::async_replay_matching(ctx.tasks, filter, store::wall_clock::now(), use_tuple);
  if (e) co_return a.unavailable(*e);
  std::string body;
  observe::json_writer w(body);
  w.open_object().key("replayed").open_array();
  for (auto const& id : ids) {
    w.value(id);
    log_replayed(ctx, id, "bulk");
  }
  w.close_array().field("more", ids.size() == filter.limit).close_object();
  co_return a.json(bhttp::status::accepted, std::move(body += '\n'));
}

/// DELETE /dlq/{id}: a dead letter someone has dealt with, gone with its attempts.
net::awaitable<response> delete_dead_letter(const answers& a, const task_api_context& ctx, const std::string& id) {
  auto [e, deleted] = co_await store::async_delete_dead_letter(ctx.tasks, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!deleted) co_return a.error(bhttp::status::not_found, "not_found", "no dead letter with this id");
  ctx.log.info("dead_letter_deleted", {{"task_id", id}});
  std::string body;
  observe::json_writer(body).open_object().field("id", id).field("deleted", true).close_object();
  co_return a.json(bhttp::status::ok, std::move(body += '\n'));
}

}  // namespace rebound::admin::api
