#include "proxy/delivery/alert_notice.hpp"

#include "proxy/delivery/scheduler.hpp"
#include "proxy/idempotency/key.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/store/task_store.hpp"

namespace rebound::delivery {
namespace {

using wall = store::wall_clock;

/** A dead letter's notice for alert.webhook, as a task of its own: durable, retried on R-3's
    webhook table with one idempotency key, and EXHAUSTED at its end rather than dead-lettered. */
std::optional<store::retry_task> alert_task(const runtime::session_context& ctx, const store::retry_task& dead,
                                            std::string_view reason, unsigned attempts) {
  auto const& url = ctx.cfg().alert_webhook;
  auto key = idempotency::new_key();
  if (url.empty() || !key) return std::nullopt;
  auto const authority =
      url.substr(7, url.find('/', 7) == std::string::npos ? std::string::npos : url.find('/', 7) - 7);
  std::string body;
  observe::json_writer w(body);
  w.open_object().field("event", "dead_lettered").field("task_id", dead.id).field("dependency", dead.dependency);
  w.field("method", dead.method).field("reason", reason).field("attempts", attempts);
  w.field("idempotency_key", dead.idempotency_key).field("dead_lettered_at", wall::now());
  w.field("task", std::string(ctx.admin_base) + "/retry-tasks/" + dead.id).close_object();
  body += '\n';
  auto notice = store::new_task({"alert",
                                 "POST",
                                 url,
                                 {{"Host", authority}, {"Content-Type", "application/json"}},
                                 std::move(body),
                                 std::string(alert_policy_id),
                                 std::string(ctx.cfg().defaults.idempotency.header),
                                 std::move(*key)});
  if (notice) notice->beyond_max_size = true;
  return notice;
}

}  // namespace

const retry::policy& alert_policy() {
  static const retry::policy p = [] {
    retry::policy a;
    a.context = retry::context_kind::webhook;
    a.max_retries = retry::builtin_max_retries(a.context);
    a.schedule = retry::builtin_schedule(a.context);
    a.total_timeout = retry::builtin_total_timeout(a.context);
    return a;
  }();
  return p;
}

void raise_alert(const runtime::session_context& ctx, observe::metrics* metrics, const store::retry_task& dead,
                 std::string_view reason, unsigned attempts) {
  if (ctx.cfg().alert_webhook.empty()) return;
  auto lost = [log = ctx.log, metrics, id = dead.id](const std::string& why) {
    log->error("alert_failed", {{"task_id", id}, {"reason", "not_stored"}, {"message", why}});
    if (metrics) metrics->alert_notice("lost");
  };
  auto notice = alert_task(ctx, dead, reason, attempts);
  if (!notice) return lost("no idempotency key or id could be made for the notice (the CSPRNG failed)");
  ctx.store->submit_accept(std::move(*notice), [lost](std::optional<store::store_error> e, bool) {
    if (e) lost(e->message);
  });
}

}  // namespace rebound::delivery
