#include "proxy/observe/metrics.hpp"

#include "proxy/observe/metric_families.hpp"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace rebound::observe {

using namespace detail;
using prometheus::Histogram;

metrics::metrics(std::string service)
    : service_(std::move(service)),
      registry_(std::make_shared<prometheus::Registry>()),
      attempts_(counter(attempts_total, *registry_)),
      exhausted_(counter(exhausted_total, *registry_)),
      declined_(counter(declined_total, *registry_)),
      hedges_(counter(hedges_total, *registry_)),
      hedges_suppressed_(counter(hedges_suppressed_total, *registry_)),
      backoff_(prometheus::BuildHistogram()
                   .Name("retry_backoff_duration_seconds")
                   .Help("Waits scheduled before a retry")
                   .Register(*registry_)),
      request_attempts_(prometheus::BuildHistogram()
                            .Name("retry_request_attempts")
                            .Help("Attempts a request or handed-over task took, counted when it ended, by outcome "
                                  "(success, failure, abandoned) and context")
                            .Register(*registry_)),
      budget_utilization_(prometheus::BuildGauge()
                              .Name("retry_budget_utilization_ratio")
                              .Help("Retries spent over retries allowed in the budget window (R-7)")
                              .Register(*registry_)),
      dlq_messages_(counter(dlq_total, *registry_)),
      breaker_state_(prometheus::BuildGauge()
                         .Name("circuit_breaker_state")
                         .Help("Circuit breaker state: 0 closed, 1 half-open, 2 open")
                         .Register(*registry_)),
      limited_(counter(limited_total, *registry_)),
      address_ejections_(counter(address_ejections_total, *registry_)),
      concurrency_limit_(prometheus::BuildGauge()
                             .Name("dependency_concurrency_limit")
                             .Help("Attempts the dependency may have in flight at once, all workers' shares added up")
                             .Register(*registry_)),
      in_flight_(prometheus::BuildGauge()
                     .Name("dependency_requests_in_flight")
                     .Help("Attempts in flight to the dependency, all workers added up")
                     .Register(*registry_)),
      requests_(counter(requests_total, *registry_)),
      upstream_duration_(prometheus::BuildHistogram()
                             .Name("upstream_request_duration_seconds")
                             .Help("Upstream attempts, from connect to the response head")
                             .Register(*registry_)),
      idempotent_(counter(idempotent_total, *registry_)),
      upgrades_(counter(upgrades_total, *registry_)),
      upgrade_bytes_(counter(upgrade_bytes_total, *registry_)),
      task_age_(prometheus::BuildHistogram()
                    .Name("retry_task_age_seconds")
                    .Help("Age of handed-over tasks when they end (delivered or dead-lettered), from accept")
                    .Register(*registry_)),
      tasks_(prometheus::BuildGauge()
                 .Name("retry_tasks")
                 .Help("Handed-over tasks in the store, by status, as last counted")
                 .Register(*registry_)),
      backlog_over_24h_(prometheus::BuildGauge()
                            .Name("retry_tasks_pending_over_24h")
                            .Help("Handed-over tasks not yet ended (pending or in flight) accepted more than 24 "
                                  "hours ago, as last counted")
                            .Register(*registry_)),
      oldest_pending_(prometheus::BuildGauge()
                          .Name("retry_task_oldest_pending_age_seconds")
                          .Help("Age of the oldest handed-over task not yet ended, as last counted (0: none)")
                          .Register(*registry_)),
      store_up_(prometheus::BuildGauge()
                    .Name("store_up")
                    .Help("1 while the task store answers, 0 while it is unavailable")
                    .Register(*registry_)),
      spans_exported_(prometheus::BuildCounter()
                          .Name("trace_spans_exported_total")
                          .Help("Spans the trace collector accepted (tracing.endpoint)")
                          .Register(*registry_)),
      spans_dropped_(prometheus::BuildCounter()
                         .Name("trace_spans_dropped_total")
                         .Help("Spans not exported, by reason: queue_full (the export queue was full), "
                               "export_failed (the collector refused, timed out or was unreachable)")
                         .Register(*registry_)),
      alert_notices_(prometheus::BuildCounter()
                         .Name("alert_notices_total")
                         .Help("R-8's alert notices (alert.webhook), by outcome: delivered, failed (its retries "
                               "ran out), lost (it could not be stored)")
                         .Register(*registry_)),
      dns_lookups_(prometheus::BuildCounter()
                       .Name("dns_lookups_total")
                       .Help("DNS lookups of upstream names, by result: answered, absent (no such name or no "
                             "address), stale (the servers failed; the last answer was used), failed")
                       .Register(*registry_)),
      store_commit_(prometheus::BuildHistogram()
                        .Name("store_commit_duration_seconds")
                        .Help("Commits of the task store, each with its fsync and the calls grouped into it")
                        .Register(*registry_)
                        .Add({{"service", service_}}, commit_buckets())) {
  // The name every Prometheus client library gives it: rules tell a new process (whose
  // counters start again) from a scrape gap by it (deploy/prometheus/rebound-rules.yml).
  prometheus::BuildGauge()
      .Name("process_start_time_seconds")
      .Help("Start time of the process since the Unix epoch, in seconds")
      .Register(*registry_)
      .Add({{"service", service_}})
      .Set(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

void metrics::task_ended(const std::string& dependency, std::string_view context, std::chrono::duration<double> age) {
  auto l = labels(dependency);
  l.emplace("context", std::string(context));
  task_age_.Add(l, task_age_buckets()).Observe(age.count());
}

void metrics::set_tasks(std::string_view store, std::string_view status, std::uint64_t n) {
  tasks_.Add({{"service", service_}, {"store", std::string(store)}, {"status", std::string(status)}})
      .Set(static_cast<double>(n));
}

void metrics::set_backlog(std::string_view store, std::uint64_t over_24h, std::chrono::duration<double> oldest) {
  prometheus::Labels const l{{"service", service_}, {"store", std::string(store)}};
  backlog_over_24h_.Add(l).Set(static_cast<double>(over_24h));
  oldest_pending_.Add(l).Set(oldest.count());
}

void metrics::set_store_up(bool up) { store_up_.Add({{"service", service_}}).Set(up ? 1 : 0); }

void metrics::spans_exported(std::size_t n) {
  spans_exported_.Add({{"service", service_}}).Increment(static_cast<double>(n));
}

void metrics::spans_dropped(std::string_view reason, std::size_t n) {
  spans_dropped_.Add({{"service", service_}, {"reason", std::string(reason)}}).Increment(static_cast<double>(n));
}

void metrics::alert_notice(std::string_view outcome) {
  alert_notices_.Add({{"service", service_}, {"outcome", std::string(outcome)}}).Increment();
}

void metrics::dns_lookup(std::string_view result) {
  dns_lookups_.Add({{"service", service_}, {"result", std::string(result)}}).Increment();
}

void metrics::store_commit(std::chrono::nanoseconds took) {
  store_commit_.Observe(std::chrono::duration<double>(took).count());
}

dependency_metrics& metrics::dependency(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto& slot = dependencies_[name];
  if (!slot) slot = std::make_unique<dependency_metrics>(*this, name);
  return *slot;
}

std::string metrics::scrape() const {
  {
    std::lock_guard lock(mutex_);
    for (auto const& [name, d] : dependencies_) d->fold();
  }
  auto families = registry_->Collect();
  auto text = prometheus::TextSerializer().Serialize(families);
  // prometheus-cpp leaves out a family with no series yet (no attempt made, no message
  // dead-lettered). Its HELP and TYPE lines still go out, so a dashboard or alert rule finds
  // the name from the first scrape on and no series has to be invented to carry it.
  for (auto const& c : {attempts_total, exhausted_total, declined_total, hedges_total, hedges_suppressed_total,
                        dlq_total, requests_total, limited_total, address_ejections_total}) {
    bool const present =
        std::any_of(families.begin(), families.end(), [&](auto const& mf) { return mf.name == c.name; });
    if (!present) text += std::string("# HELP ") + c.name + " " + c.help + "\n# TYPE " + c.name + " counter\n";
  }
  return text;
}

}  // namespace rebound::observe
