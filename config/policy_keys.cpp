// Every key of a policy layer: how it is read, and how it is described (policy_keys.hpp).
#include "config/policy_keys.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>

namespace rebound::config {
namespace {

using layer = reader::policy_layer;
using node = YAML::Node;

/// A key holding one scalar, read with `parse` and set on the policy by `set`.
template <class T, class Parse, class Set>
void read_scalar(reader& r, const node& n, const std::string& path, layer& l, std::string_view key, Parse parse,
                 Set set) {
  std::optional<T> v;
  r.optional_typed(n, key, path, v, parse);
  if (v) l.write(std::string(key), std::move(*v), set);
}

/// `dead_letter: off` as the issue and SPEC write it, or a plain boolean.
parsed<bool> parse_on_off(std::string_view v) {
  if (v == "on") return parsed<bool>::ok(true);
  if (v == "off") return parsed<bool>::ok(false);
  auto b = parse_bool(v);
  if (!b.value) b.error = "invalid value \"" + std::string(v) + "\" (expected on or off)";
  return b;
}

constexpr auto table = std::to_array<policy_key>({
    {"context",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       r.optional_typed(n, "context", path, l.context, parse_context);
     },
     [](object_writer& w, const policy& p) { w.string("context", to_string(p.context)); }},
    {"max_retries",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       read_scalar<unsigned>(r, n, path, l, "max_retries", parse_max_retries,
                             [](policy& p, unsigned v) { p.max_retries = v; });
     },
     [](object_writer& w, const policy& p) { w.integer("max_retries", p.max_retries); }},
    {"backoff",
     [](reader& r, const node& n, const std::string& path, layer& l) { r.read_backoff(n["backoff"], path, l); },
     [](object_writer& w, const policy& p) {
       object_writer b(w.nested("backoff"));
       b.string("base", format_duration(p.backoff.base));
       b.string("cap", format_duration(p.backoff.cap));
       b.string("jitter", p.backoff.jitter == jitter_kind::full ? "full" : "decorrelated");
     }},
    {"schedule",
     [](reader& r, const node& n, const std::string& path, layer& l) { r.read_schedule(n["schedule"], path, l); },
     [](object_writer& w, const policy& p) {
       if (p.schedule.empty()) return;
       std::vector<std::string> steps;
       for (auto const s : p.schedule) steps.push_back(format_duration(s));
       w.strings("schedule", steps);
     }},
    {"total_timeout",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       read_scalar<duration>(r, n, path, l, "total_timeout", parse_duration,
                             [](policy& p, duration v) { p.total_timeout = v; });
     },
     [](object_writer& w, const policy& p) { w.string("total_timeout", format_duration(p.total_timeout)); }},
    {"attempt_timeout",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       read_scalar<duration>(r, n, path, l, "attempt_timeout", parse_duration,
                             [](policy& p, duration v) { p.attempt_timeout = v; });
     },
     [](object_writer& w, const policy& p) { w.string("attempt_timeout", format_duration(p.attempt_timeout)); }},
    {"retry_on",
     [](reader& r, const node& n, const std::string& path, layer& l) { r.read_retry_on(n["retry_on"], path, l); },
     [](object_writer& w, const policy& p) { w.strings("retry_on", p.retry_on.names()); }},
    {"max_retry_body",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       read_scalar<std::uint64_t>(r, n, path, l, "max_retry_body", parse_size,
                                  [](policy& p, std::uint64_t v) { p.max_retry_body = v; });
     },
     [](object_writer& w, const policy& p) { w.string("max_retry_body", format_size(p.max_retry_body)); }},
    {"retry_layered",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       read_scalar<bool>(r, n, path, l, "retry_layered", parse_bool, [](policy& p, bool v) { p.retry_layered = v; });
     },
     [](object_writer& w, const policy& p) { w.boolean("retry_layered", p.retry_layered); }},
    {"hedge",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       r.read_hedge(n["hedge"], reader::join(path, "hedge"), l);
     },
     [](object_writer& w, const policy& p) {
       if (!p.hedge.enabled()) return w.string("hedge", "off");
       object_writer h(w.nested("hedge"));
       h.string("after", p.hedge.after_p95 ? std::string("p95") : format_duration(p.hedge.after));
       h.integer("max", p.hedge.max);
     }},
    {"upgrades",
     [](reader& r, const node& n, const std::string& path, layer& l) { r.read_upgrades(n["upgrades"], path, l); },
     [](object_writer& w, const policy& p) {
       w.strings("upgrades", p.websocket_upgrades ? std::vector<std::string>{"websocket"} : std::vector<std::string>{});
     }},
    {"idempotency",
     [](reader& r, const node& n, const std::string& path, layer& l) { r.read_idempotency(n["idempotency"], path, l); },
     [](object_writer& w, const policy& p) {
       object_writer i(w.nested("idempotency"));
       i.string("header", p.idempotency.header);
       i.boolean("inject", p.idempotency.inject);
     }},
    {"budget", [](reader& r, const node& n, const std::string& path, layer& l) { r.read_budget(n["budget"], path, l); },
     [](object_writer& w, const policy& p) {
       object_writer b(w.nested("budget"));
       b.number("ratio", p.budget.ratio);
       b.string("window", format_duration(p.budget.window));
       b.integer("min_retries", p.budget.min_retries);
     },
     true},
    {"circuit_breaker",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       r.read_circuit_breaker(n["circuit_breaker"], path, l);
     },
     [](object_writer& w, const policy& p) {
       auto const& cb = p.circuit_breaker;
       object_writer c(w.nested("circuit_breaker"));
       c.string("mode", to_string(cb.mode));
       c.number("failure_ratio", cb.failure_ratio);
       c.integer("min_requests", cb.min_requests);
       c.string("window", format_duration(cb.window));
       c.boolean("open_on_budget_exhausted", cb.open_on_budget_exhausted);
       c.string("open_for", format_duration(cb.open_for));
       c.integer("half_open_probes", cb.half_open_probes);
     },
     true},
    {"concurrency",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       r.read_concurrency(n["concurrency"], reader::join(path, "concurrency"), l);
     },
     [](object_writer& w, const policy& p) {
       auto const& cc = p.concurrency;
       object_writer c(w.nested("concurrency"));
       c.string("mode", to_string(cc.mode));
       if (cc.mode == concurrency_mode::fixed) c.integer("limit", cc.limit);
       if (cc.mode == concurrency_mode::adaptive) {
         c.integer("min_limit", cc.min_limit);
         c.integer("max_limit", cc.max_limit);
         c.number("tolerance", cc.tolerance);
         c.string("probe_interval", format_duration(cc.probe_interval));
       }
     },
     true},
    {"outlier_detection",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       r.read_outlier_detection(n["outlier_detection"], reader::join(path, "outlier_detection"), l);
     },
     [](object_writer& w, const policy& p) {
       auto const& od = p.outlier_detection;
       if (!od.enabled) return w.string("outlier_detection", "off");
       object_writer o(w.nested("outlier_detection"));
       o.integer("consecutive_failures", od.consecutive_failures);
       o.string("base_ejection", format_duration(od.base_ejection));
       o.string("max_ejection", format_duration(od.max_ejection));
       o.number("max_ejected_share", od.max_ejected_share);
     },
     true},
    {"approval",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       if (auto v = r.scalar(n["approval"], reader::join(path, "approval")))
         l.write("approval", std::move(*v), [](policy& p, const std::string& a) { p.approval = a; });
     },
     [](object_writer& w, const policy& p) {
       if (!p.approval.empty()) w.string("approval", p.approval);
     }},
    {"dead_letter",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       read_scalar<bool>(r, n, path, l, "dead_letter", parse_on_off, [](policy& p, bool v) { p.dead_letter = v; });
     },
     [](object_writer& w, const policy& p) {
       if (!p.dead_letter) w.boolean("dead_letter", false);
     }},
    {"grpc_streaming",
     [](reader& r, const node& n, const std::string& path, layer& l) {
       read_scalar<bool>(r, n, path, l, "grpc_streaming", parse_bool, [](policy& p, bool v) { p.grpc_streaming = v; });
     },
     [](object_writer& w, const policy& p) {
       if (p.grpc_streaming) w.boolean("grpc_streaming", true);
     }},
});

}  // namespace

std::span<const policy_key> policy_key_table() { return table; }

std::vector<std::string_view> reader::policy_keys() {
  std::vector<std::string_view> keys;
  for (auto const& k : table) keys.push_back(k.name);
  return keys;
}

std::vector<std::string_view> reader::per_dependency_keys() {
  std::vector<std::string_view> keys;
  for (auto const& k : table)
    if (k.per_dependency) keys.push_back(k.name);
  return keys;
}

reader::policy_layer reader::read_policy_layer(const YAML::Node& n, const std::string& path) {
  policy_layer l;
  l.node = n;
  l.path = path;
  for (auto const& k : table)
    if (n[std::string(k.name)]) k.read(*this, n, path, l);
  return l;
}

void describe_policy(object_writer& w, const policy& p, bool with_per_dependency) {
  for (auto const& k : table)
    if (with_per_dependency || !k.per_dependency) k.describe(w, p);
}

}  // namespace rebound::config
