// A policy layer as written, and how the layers resolve into one policy (SPEC 2.1).
#include "config/schema_reader.hpp"

#include "config/check.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cctype>

namespace rebound::config {

/// `backoff: {base, cap, jitter}`.
void reader::read_backoff(const YAML::Node& b, const std::string& path, policy_layer& l) {
  auto const bpath = join(path, "backoff");
  if (expect_map(b, bpath)) {
    check_keys(b, bpath, {"base", "cap", "jitter"});
    std::optional<duration> base, cap;
    std::optional<jitter_kind> jitter;
    optional_typed(b, "base", bpath, base, parse_duration);
    optional_typed(b, "cap", bpath, cap, parse_duration);
    optional_typed(b, "jitter", bpath, jitter, parse_jitter);
    if (b["jitter"] && !jitter) diags_.back().rule = "R-1";
    if (base) l.write("backoff.base", *base, [](policy& p, duration v) { p.backoff.base = v; });
    if (cap) l.write("backoff.cap", *cap, [](policy& p, duration v) { p.backoff.cap = v; });
    if (jitter) l.write("backoff.jitter", *jitter, [](policy& p, jitter_kind v) { p.backoff.jitter = v; });
  }
}

/// `schedule: [1s, 5s, 30s, 2m]`: R-3's fixed waits, 1 to 32 of them.
void reader::read_schedule(const YAML::Node& sch, const std::string& path, policy_layer& l) {
  auto const spath = join(path, "schedule");
  if (!sch.IsSequence() || sch.size() == 0 || sch.size() > 32) {
    error(sch, spath, "must be a list of 1 to 32 durations, e.g. [1s, 5s, 30s, 2m]");
  } else {
    std::vector<duration> steps;
    auto const before = diags_.size();
    for (std::size_t i = 0; i < sch.size(); ++i) {
      auto const step_path = spath + "[" + std::to_string(i) + "]";
      auto const v = scalar(sch[i], step_path);
      if (!v) continue;
      auto const d = parse_duration(*v);
      if (!d.value)
        error(sch[i], step_path, d.error);
      else
        steps.push_back(*d.value);
    }
    if (diags_.size() == before)
      l.write("schedule", std::move(steps), [](policy& p, const std::vector<duration>& v) { p.schedule = v; });
  }
}

/// `idempotency: {header, inject}`.
void reader::read_idempotency(const YAML::Node& i, const std::string& path, policy_layer& l) {
  auto const ipath = join(path, "idempotency");
  if (expect_map(i, ipath)) {
    check_keys(i, ipath, {"header", "inject"});
    std::optional<std::string> header;
    std::optional<bool> inject;
    optional_typed(i, "header", ipath, header, parse_header_name);
    optional_typed(i, "inject", ipath, inject, parse_bool);
    if (header)
      l.write("idempotency.header", std::move(*header),
              [](policy& p, const std::string& v) { p.idempotency.header = v; });
    if (inject) l.write("idempotency.inject", *inject, [](policy& p, bool v) { p.idempotency.inject = v; });
  }
}

/// `budget: {ratio, window, min_retries}`: never off, at most 20% of requests.
void reader::read_budget(const YAML::Node& b, const std::string& path, policy_layer& l) {
  auto const bpath = join(path, "budget");
  if (b.IsScalar() && (b.Scalar() == "off" || b.Scalar() == "false" || b.Scalar() == "none")) {
    error(b, bpath, "the retry budget may not be disabled: without it, retries multiply an outage", "R-7");
  } else if (expect_map(b, bpath)) {
    check_keys(b, bpath, {"ratio", "window", "min_retries"});
    std::optional<double> ratio;
    std::optional<duration> window;
    std::optional<unsigned> min_retries;
    optional_typed(b, "ratio", bpath, ratio, parse_ratio);
    if (ratio && (*ratio == 0 || *ratio > 0.2)) {
      error(b["ratio"], join(bpath, "ratio"),
            *ratio == 0 ? "ratio 0 disables the retry budget (expected more than 0, at most 0.2)"
                        : "ratio " + b["ratio"].Scalar() + " is above 0.2: retries may be at most 20% of requests",
            "R-7");
      ratio.reset();
    }
    optional_typed(b, "window", bpath, window, parse_duration);
    optional_typed(b, "min_retries", bpath, min_retries, parse_count);
    if (ratio) l.write("budget.ratio", *ratio, [](policy& p, double v) { p.budget.ratio = v; });
    if (window) l.write("budget.window", *window, [](policy& p, duration v) { p.budget.window = v; });
    if (min_retries)
      l.write("budget.min_retries", *min_retries, [](policy& p, unsigned v) { p.budget.min_retries = v; });
  }
}

/// `circuit_breaker: {...}`.
void reader::read_circuit_breaker(const YAML::Node& cb, const std::string& path, policy_layer& l) {
  auto const cpath = join(path, "circuit_breaker");
  if (expect_map(cb, cpath)) {
    check_keys(cb, cpath,
               {"mode", "failure_ratio", "min_requests", "window", "open_on_budget_exhausted", "open_for",
                "half_open_probes"});
    std::optional<breaker_mode> mode;
    std::optional<double> failure_ratio;
    std::optional<unsigned> min_requests, probes;
    std::optional<duration> window, open_for;
    std::optional<bool> open_on_budget;
    optional_typed(cb, "mode", cpath, mode, parse_breaker_mode);
    optional_typed(cb, "failure_ratio", cpath, failure_ratio, parse_ratio);
    if (failure_ratio && *failure_ratio == 0) {
      error(cb["failure_ratio"], join(cpath, "failure_ratio"), "must be greater than 0");
      failure_ratio.reset();
    }
    optional_typed(cb, "min_requests", cpath, min_requests, parse_count);
    optional_typed(cb, "window", cpath, window, parse_duration);
    optional_typed(cb, "open_on_budget_exhausted", cpath, open_on_budget, parse_bool);
    optional_typed(cb, "open_for", cpath, open_for, parse_duration);
    optional_typed(cb, "half_open_probes", cpath, probes, parse_count);
    for (auto key : {"min_requests", "half_open_probes"}) {
      auto const& v = std::string_view(key) == "min_requests" ? min_requests : probes;
      if (v && *v == 0) error(cb[key], join(cpath, key), "must be at least 1");
    }
    for (auto key : {"window", "open_for"}) {
      auto const& v = std::string_view(key) == "window" ? window : open_for;
      if (v && v->count() == 0) error(cb[key], join(cpath, key), "must be greater than 0");
    }
    using cb_policy = breaker_policy;
    auto set = [&l](const char* key, auto const& v, auto member) {
      if (v)
        l.write(std::string("circuit_breaker.") + key, *v,
                [member](policy& p, auto x) { p.circuit_breaker.*member = x; });
    };
    set("mode", mode, &cb_policy::mode);
    set("failure_ratio", failure_ratio, &cb_policy::failure_ratio);
    set("min_requests", min_requests, &cb_policy::min_requests);
    set("window", window, &cb_policy::window);
    set("open_on_budget_exhausted", open_on_budget, &cb_policy::open_on_budget_exhausted);
    set("open_for", open_for, &cb_policy::open_for);
    set("half_open_probes", probes, &cb_policy::half_open_probes);
  }
}

/// `upgrades: [websocket]` or `[]`: the protocols a request may switch to through this route (issue 32).
void reader::read_upgrades(const YAML::Node& u, const std::string& path, policy_layer& l) {
  auto const upath = join(path, "upgrades");
  if (!u.IsSequence()) {
    error(u, upath, "must be a list: [websocket] lets WebSocket handshakes through, [] refuses them");
  } else {
    bool websocket = false, ok = true;
    for (std::size_t i = 0; i < u.size(); ++i) {
      auto const item_path = upath + "[" + std::to_string(i) + "]";
      auto const v = scalar(u[i], item_path);
      if (!v) {
        ok = false;
      } else if (*v == "websocket") {
        websocket = true;
      } else {
        ok = false;
        error(u[i], item_path,
              *v == "h2c" ? "h2c is not relayed: the proxy port speaks HTTP/2 by prior knowledge, and an h2c "
                            "offer is dropped so the request goes on as HTTP/1.1"
                          : "unknown protocol \"" + *v + "\" (expected websocket)");
      }
    }
    if (ok) l.write("upgrades", websocket, [](policy& p, bool v) { p.websocket_upgrades = v; });
  }
}

/// `retry_on: default` or a list of R-4's retry classes.
void reader::read_retry_on(const YAML::Node& r, const std::string& path, policy_layer& l) {
  auto const rpath = join(path, "retry_on");
  if (r.IsScalar() && r.Scalar() == "default") {
    l.write("retry_on", retry::retry_on::r4_default(), [](policy& p, const retry::retry_on& v) { p.retry_on = v; });
  } else if (r.IsSequence()) {
    retry::retry_on set = retry::retry_on::none();
    bool ok = true;
    for (std::size_t k = 0; k < r.size(); ++k) {
      auto const epath = rpath + "[" + std::to_string(k) + "]";
      auto const v = scalar(r[k], epath);
      if (!v) {
        ok = false;
        continue;
      }
      auto const c = retry::retry_on::parse(*v);
      if (!c.value) {
        error(r[k], epath, c.error, "R-4");
        ok = false;
        continue;
      }
      set.add(*c.value);
    }
    if (ok) l.write("retry_on", set, [](policy& p, const retry::retry_on& v) { p.retry_on = v; });
  } else {
    error(r, rpath, "expected `default` or a list of retry classes");
  }
}

/** `hedge: {after: 50ms | p95, max: 1}`, or `hedge: off` to turn off one a wider layer set.
    `after` is required: there is no delay that suits every dependency. */
void reader::read_hedge(const YAML::Node& h, const std::string& hpath, policy_layer& l) {
  auto out = [&l](const hedge_policy& v) {
    l.write("hedge", v, [](policy& p, const hedge_policy& x) { p.hedge = x; });
  };
  if (h.IsScalar() && (h.Scalar() == "off" || h.Scalar() == "false")) {
    out(hedge_policy{});
    return;
  }
  if (!h.IsMap()) {
    error(h, hpath, "expected `off` or a map like {after: 50ms, max: 1} (after: a duration or p95)");
    return;
  }
  check_keys(h, hpath, {"after", "max"});
  hedge_policy hp;
  hp.max = 1;
  auto const before = diags_.size();
  if (auto a = h["after"]) {
    auto const apath = join(hpath, "after");
    if (auto v = scalar(a, apath)) {
      if (*v == "p95") {
        hp.after_p95 = true;
      } else if (auto d = parse_duration(*v); !d.value) {
        error(a, apath, "invalid value \"" + *v + "\" (expected p95 or a duration such as 50ms)");
      } else if (d.value->count() == 0) {
        error(a, apath, "must be greater than 0 (a hedge at once doubles every request)");
      } else {
        hp.after = *d.value;
      }
    }
  } else {
    error(h, join(hpath, "after"), "is required: p95 (the dependency's observed latency) or a duration such as 50ms");
  }
  if (h["max"]) {
    unsigned v = 0;
    typed(h, "max", hpath, v, [](std::string_view s) {
      unsigned x = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
      if (ec != std::errc{} || end != s.data() + s.size() || x < 1 || x > 3)
        return parsed<unsigned>::fail("invalid max \"" + std::string(s) +
                                      "\" (expected 1 to 3 hedges; `hedge: off` turns hedging off)");
      return parsed<unsigned>::ok(x);
    });
    hp.max = v;
  }
  if (diags_.size() == before) out(hp);
}

void reader::read_concurrency(const YAML::Node& c, const std::string& cpath, policy_layer& l) {
  auto out = [&l](const concurrency_policy& v) {
    l.write("concurrency", v, [](policy& p, const concurrency_policy& x) { p.concurrency = x; });
  };
  if (c.IsScalar() && (c.Scalar() == "off" || c.Scalar() == "false")) {
    out(concurrency_policy{});
    return;
  }
  if (!c.IsMap()) {
    error(c, cpath, "expected `off` or a map like {mode: adaptive} or {mode: fixed, limit: 50}");
    return;
  }
  check_keys(c, cpath, {"mode", "limit", "min_limit", "max_limit", "tolerance", "probe_interval"});
  concurrency_policy cp;
  auto const before = diags_.size();
  if (c["mode"]) {
    typed(c, "mode", cpath, cp.mode, [](std::string_view s) {
      if (s == "off") return parsed<concurrency_mode>::ok(concurrency_mode::off);
      if (s == "fixed") return parsed<concurrency_mode>::ok(concurrency_mode::fixed);
      if (s == "adaptive") return parsed<concurrency_mode>::ok(concurrency_mode::adaptive);
      return parsed<concurrency_mode>::fail("invalid mode \"" + std::string(s) +
                                            "\" (expected off, fixed or adaptive)");
    });
  } else {
    error(c, join(cpath, "mode"), "is required: off, fixed (with limit) or adaptive");
  }
  auto count = [&](const char* key, unsigned& v) {
    if (!c[key]) return;
    std::optional<unsigned> got;
    optional_typed(c, key, cpath, got, parse_count);
    if (!got) return;
    if (*got == 0 || *got > 1000000)
      error(c[key], join(cpath, key), "must be between 1 and 1000000");
    else
      v = *got;
  };
  count("limit", cp.limit);
  count("min_limit", cp.min_limit);
  count("max_limit", cp.max_limit);
  if (c["tolerance"]) {
    std::optional<double> t;
    optional_typed(c, "tolerance", cpath, t, parse_ratio);
    if (t) cp.tolerance = *t;
  }
  if (c["probe_interval"]) {
    std::optional<duration> d;
    optional_typed(c, "probe_interval", cpath, d, parse_duration);
    if (d && d->count() < 1000)
      error(c["probe_interval"], join(cpath, "probe_interval"),
            "must be at least 1s: each probe holds the dependency at min_limit while it measures");
    else if (d)
      cp.probe_interval = *d;
  }
  if (cp.mode == concurrency_mode::fixed && !c["limit"]) error(c, join(cpath, "limit"), "is required with mode: fixed");
  if (cp.mode != concurrency_mode::fixed && c["limit"])
    error(c["limit"], join(cpath, "limit"),
          "applies to mode: fixed only; adaptive moves between min_limit and max_limit");
  if (cp.min_limit > cp.max_limit)
    error(c, join(cpath, "min_limit"),
          "min_limit " + std::to_string(cp.min_limit) + " is above max_limit " + std::to_string(cp.max_limit));
  if (diags_.size() == before) out(cp);
}

void reader::read_outlier_detection(const YAML::Node& o, const std::string& opath, policy_layer& l) {
  auto out = [&l](const outlier_policy& v) {
    l.write("outlier_detection", v, [](policy& p, const outlier_policy& x) { p.outlier_detection = x; });
  };
  outlier_policy op;
  if (o.IsScalar() && (o.Scalar() == "off" || o.Scalar() == "false")) {
    op.enabled = false;
    out(op);
    return;
  }
  if (!o.IsMap()) {
    error(o, opath, "expected `off` or a map like {consecutive_failures: 5, base_ejection: 30s}");
    return;
  }
  check_keys(o, opath, {"consecutive_failures", "base_ejection", "max_ejection", "max_ejected_share"});
  auto const before = diags_.size();
  if (o["consecutive_failures"]) {
    std::optional<unsigned> n;
    optional_typed(o, "consecutive_failures", opath, n, parse_count);
    if (n && (*n == 0 || *n > 1000))
      error(o["consecutive_failures"], join(opath, "consecutive_failures"), "must be between 1 and 1000");
    else if (n)
      op.consecutive_failures = *n;
  }
  for (auto key : {"base_ejection", "max_ejection"}) {
    if (!o[key]) continue;
    std::optional<duration> d;
    optional_typed(o, key, opath, d, parse_duration);
    if (d && d->count() < 100)
      error(o[key], join(opath, key), "must be at least 100ms");
    else if (d)
      (std::string_view(key) == "base_ejection" ? op.base_ejection : op.max_ejection) = *d;
  }
  if (op.max_ejection < op.base_ejection)
    error(o, join(opath, "max_ejection"),
          "max_ejection " + format_duration(op.max_ejection) + " is below base_ejection " +
              format_duration(op.base_ejection));
  if (o["max_ejected_share"]) {
    std::optional<double> share;
    optional_typed(o, "max_ejected_share", opath, share, parse_ratio);
    if (share) op.max_ejected_share = *share;
  }
  if (diags_.size() == before) out(op);
}

void reader::check_concurrency_share(const policy_layer& l, unsigned workers) {
  if (!l.wrote("concurrency")) return;
  policy written;
  l.apply(written);
  auto const& cc = written.concurrency;
  if (cc.mode != concurrency_mode::fixed || cc.limit >= workers) return;
  warn(l.node["concurrency"], join(l.path, "concurrency.limit"),
       "limit " + std::to_string(cc.limit) + " is below workers (" + std::to_string(workers) +
           "): each worker holds at least 1, so up to " + std::to_string(workers) + " go through at once",
       "");
}

/** Route over dependency over defaults over the context's built-ins, then the checks of
    SPEC 2.1 that concern one resolved policy. Each finding points at the layer that set
    the value, or at the most specific layer when the value is built in. */
policy reader::resolve(std::initializer_list<const policy_layer*> specific_first) {
  policy p;
  auto const* most_specific = *specific_first.begin();
  auto where = [&](std::string_view key) {
    for (auto const* l : specific_first)
      if (l->wrote(key)) return l;
    return most_specific;
  };
  for (auto const* l : specific_first)
    if (l->context) {
      p.context = *l->context;
      break;
    }
  p.max_retries = builtin_max_retries(p.context);
  p.total_timeout = builtin_total_timeout(p.context);
  // The least specific layer first, so that each sets its keys over those below it.
  for (auto it = std::rbegin(specific_first); it != std::rend(specific_first); ++it) (*it)->apply(p);
  // A written schedule wins (whichever layer wrote it); else a written backoff; else the
  // context's built-in (R-3's table for webhook).
  auto const any_wrote = [&](std::string_view key) {
    return std::any_of(specific_first.begin(), specific_first.end(), [key](auto const* l) { return l->wrote(key); });
  };
  if (!any_wrote("schedule") && !any_wrote("backoff")) p.schedule = builtin_schedule(p.context);
  // Where each finding of the enforcement table (check.cpp) points: the most specific
  // layer that set the key, else the most specific layer.
  auto locate = [&](std::string_view key) -> std::pair<YAML::Node, std::string> {
    auto near = [&](const policy_layer* l, std::string_view node_key) {
      auto n = l->node[std::string(node_key)];
      return std::make_pair(n ? n : l->node, join(l->path, key));
    };
    // A finding about a key points at the layer that set it, near the key's own node.
    for (std::string_view k : {"budget.window", "idempotency.inject", "total_timeout", "attempt_timeout", "schedule",
                               "dead_letter", "hedge"})
      if (key == k) return near(where(k), k.substr(0, k.find('.')));
    if (key == "backoff") return near(where("backoff.base"), "backoff");
    return near(where("max_retries"), "max_retries");
  };
  for (auto const& f : check_policy(p)) {
    auto [n, kp] = locate(f.key);
    if (f.warning)
      warn(n, kp, f.message, f.rule);
    else
      error(n, kp, f.message, f.rule);
  }
  return p;
}

}  // namespace rebound::config
