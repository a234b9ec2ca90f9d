// Issue 34, parts 1 and 2, with the real components: Debian's `prometheus` scrapes a running
// rebound that retries and dead-letters real calls, evaluates deploy/prometheus/rebound-rules.yml,
// and is asked through its HTTP API for the recorded series of seed 003's table, a firing DLQ
// alert (R-8), and every query of deploy/grafana/rebound.json.
#include "async_helpers.hpp"

#include <cctype>
#include <cmath>
#include <functional>
#include <regex>
#include <stdexcept>

namespace itest::prometheus_test {
namespace {

std::string url_encoded(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// A Prometheus server of its own: scrapes rebound's admin port each second and evaluates the
/// shipped rules each second (production would use 15 s or more; only the pace differs).
class Prometheus {
 public:
  explicit Prometheus(std::uint16_t admin_port) : port_(free_port()) {
    write_file(dir_ + "/prometheus.yml",
               "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
               "rule_files: [\"" +
                   source_path("deploy/prometheus/rebound-rules.yml") +
                   "\"]\n"
                   "scrape_configs:\n"
                   "  - job_name: rebound\n"
                   "    static_configs: [{targets: [\"127.0.0.1:" +
                   std::to_string(admin_port) + "\"]}]\n");
    process_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        "/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/data",
        "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"});
    // Up to 30 s to open its database and listen (an ASan run of the suite keeps both cores busy).
    for (int i = 0; i < 300; ++i) {
      if (auto ready = status("/-/ready"); ready == 200) return;
      std::this_thread::sleep_for(100ms);
    }
    throw std::runtime_error("prometheus did not become ready: " + log());
  }
  ~Prometheus() {
    process_.reset();
    remove_tree(dir_);
  }

  /// GET `target` on the API, parsed; nullopt when Prometheus did not answer JSON.
  std::optional<Json> get(const std::string& target) const {
    try {
      HttpClient c(port_);
      return parse_json(c.get(target).body);
    } catch (const std::exception&) {
      return std::nullopt;  // not listening (yet, or any more): the caller's poll asks again
    }
  }
  /// The status of GET `target`, 0 when nothing answered.
  unsigned status(const std::string& target) const {
    try {
      HttpClient c(port_);
      return c.get(target).status;
    } catch (const std::exception&) {
      return 0;
    }
  }
  /// An instant query's answer (status, data.result), nullopt without one.
  std::optional<Json> query(const std::string& promql) const {
    return get("/api/v1/query?query=" + url_encoded(promql));
  }
  /// The query's samples; empty on an error or no result.
  std::vector<Json> samples(const std::string& promql) const {
    auto j = query(promql);
    if (!j || !j->get("status") || j->get("status")->s != "success") return {};
    return j->get("data")->get("result")->a;
  }
  std::string log() const { return process_ ? process_->stderr_text() : std::string(); }

 private:
  std::string dir_ = make_temp_dir();
  std::uint16_t port_;
  std::unique_ptr<ChildProcess> process_;
};

double value_of(const Json& sample) { return std::stod(sample.get("value")->a.at(1).s); }

/// Polls `ok` every 200 ms for up to 30 s.
bool eventually(const std::function<bool()>& ok) {
  for (int i = 0; i < 150; ++i) {
    if (ok()) return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

/// The one sample of `promql`, once there is exactly one (30 s at most).
std::optional<double> one_value(const Prometheus& p, const std::string& promql) {
  std::optional<double> v;
  eventually([&] {
    auto s = p.samples(promql);
    if (s.size() != 1) return false;
    v = value_of(s[0]);
    return !std::isnan(*v);
  });
  return v;
}

/// rebound with a sync dependency that answers each call's first attempt 503 and its second
/// 200, and a webhook dependency that refuses everything with a final 400 (dead-lettered).
struct Shop {
  ScriptedUpstream api;
  ScriptedUpstream hooks;
  store_dir store;
  std::unique_ptr<ReboundProcess> rb;
  unsigned calls = 0;

  Shop() {
    hooks.on("/hook", respond(400));
    ReboundOptions o;
    o.extra = store.yaml() + "service: shop\ndefaults:\n  backoff: {base: 1ms, cap: 5ms}\n" +
              "dependencies:\n  api:\n    hosts: [\"" + api.authority() +
              "\"]\n    concurrency: {mode: fixed, limit: 1000}\n  hooks:\n    hosts: [\"" +
              hooks.authority() + "\"]\n    context: webhook\n";
    rb = std::make_unique<ReboundProcess>(o);
  }
  void retried_call() {
    auto const path = "/orders/" + std::to_string(calls++);
    api.on_sequence(path, {respond(503), respond(200)});
    HttpClient client(rb->port());
    EXPECT_EQ(client.get("http://" + api.authority() + path).status, 200u);
  }
  void dead_lettered_call() {
    auto const id = accepted_task(raw_exchange(rb->port(), post(hooks.authority(), "/hook", "{}")), *rb);
    ASSERT_FALSE(id.empty());
    EXPECT_EQ(status_of(task_until(*rb, id, "DEAD_LETTERED")), "DEAD_LETTERED");
  }
  /// Traffic in two rounds with a scrape between them: rate() sees only what a counter gained
  /// between two samples, and these series are born with the first request.
  void run(const Prometheus& p) {
    retried_call();
    dead_lettered_call();
    ASSERT_TRUE(eventually([&] { return p.samples("retry_request_attempts_count{service=\"shop\"}").size() == 2; }))
        << p.log();
    for (int i = 0; i < 5; ++i) retried_call();
    dead_lettered_call();
  }
};

TEST(Prometheus, Seed003_TheRecordingRulesComputeTheTableFromRealTraffic) {
  Shop f;
  Prometheus p(f.rb->admin_port());
  f.run(p);
  auto const api = "{service=\"shop\",dependency=\"api\",context=\"sync\"}";
  auto const hooks = "{service=\"shop\",dependency=\"hooks\",context=\"webhook\"}";
  // Every call took two attempts and the second succeeded.
  auto retry_rate = one_value(p, std::string("rebound:retry_rate:ratio5m") + api);
  ASSERT_TRUE(retry_rate) << p.log();
  EXPECT_NEAR(*retry_rate, 1.0, 1e-9);
  auto attempts = one_value(p, std::string("rebound:attempts_to_success:avg5m") + api);
  ASSERT_TRUE(attempts);
  EXPECT_NEAR(*attempts, 2.0, 1e-9);
  auto second = one_value(p, std::string("rebound:second_attempt_success:ratio5m") + api);
  ASSERT_TRUE(second);
  EXPECT_NEAR(*second, 1.0, 1e-9);
  // Every handed-over call was dead-lettered after one attempt (R-4: a 400 is final).
  auto dlq_rate = one_value(p, std::string("rebound:dead_letter_rate:ratio5m") + hooks);
  ASSERT_TRUE(dlq_rate);
  EXPECT_NEAR(*dlq_rate, 1.0, 1e-9);
  EXPECT_TRUE(p.samples(std::string("rebound:dead_letter_rate:ratio5m") + api).empty())
      << "a sync call is never dead-lettered";
  auto over_24h = one_value(p, "rebound:tasks_in_retry_over_24h:sum{service=\"shop\"}");
  ASSERT_TRUE(over_24h);
  EXPECT_EQ(*over_24h, 0) << "nothing waits in retry";
  // Issue 48: what the store holds is labelled with the store, by its database's id.
  auto backlog = p.samples("retry_tasks_pending_over_24h{service=\"shop\",store=~\"sqlite/[0-9a-f]{12}\"}");
  EXPECT_EQ(backlog.size(), 1u);
  EXPECT_EQ(p.samples("retry_tasks{service=\"shop\",status=\"DEAD_LETTERED\",store=~\"sqlite/.+\"}").size(), 1u);
  auto store_up = one_value(p, "store_up{service=\"shop\"}");
  ASSERT_TRUE(store_up);
  EXPECT_EQ(*store_up, 1);
}

TEST(Prometheus, R8_ADeadLetterFiresItsAlertThroughPrometheus) {
  Shop f;
  Prometheus p(f.rb->admin_port());
  f.run(p);
  Json fired;
  ASSERT_TRUE(eventually([&] {
    auto j = p.get("/api/v1/alerts");
    if (!j || !j->get("data")) return false;
    for (auto const& a : j->get("data")->get("alerts")->a)
      if (a.get("labels")->get("alertname")->s == "ReboundDeadLettered" && a.get("state")->s == "firing") {
        fired = a;
        return true;
      }
    return false;
  })) << p.log();
  EXPECT_EQ(fired.get("labels")->get("dependency")->s, "hooks");
  EXPECT_EQ(fired.get("labels")->get("context")->s, "webhook");
  EXPECT_EQ(fired.get("labels")->get("severity")->s, "warning");
  EXPECT_NE(fired.get("annotations")->get("description")->s.find("/dlq"), std::string::npos)
      << "the alert says where to review the dead letters";
  // The sync dependency retried every call: its retry-rate alert may be pending, but fires
  // only after its 10 minutes.
  auto j = p.get("/api/v1/alerts");
  ASSERT_TRUE(j);
  for (auto const& a : j->get("data")->get("alerts")->a) {
    if (a.get("labels")->get("alertname")->s != "ReboundDeadLettered") {
      EXPECT_EQ(a.get("state")->s, "pending") << a.get("labels")->get("alertname")->s;
    }
  }
}

/// Grafana's variables as Prometheus reads them: every value, and a rate window the test's
/// one-second scrapes fill.
std::string as_grafana_sends(std::string expr) {
  for (auto const* var : {"$service", "$dependency", "$context"}) {
    for (auto at = expr.find(var); at != std::string::npos; at = expr.find(var))
      expr.replace(at, std::string_view(var).size(), ".*");
  }
  for (auto at = expr.find("$__rate_interval"); at != std::string::npos; at = expr.find("$__rate_interval"))
    expr.replace(at, std::string_view("$__rate_interval").size(), "1m");
  return expr;
}

TEST(Prometheus, EveryDashboardQueryAnswersWithSeries) {
  auto const dashboard = parse_json(read_file(source_path("deploy/grafana/rebound.json")));
  ASSERT_TRUE(dashboard) << "deploy/grafana/rebound.json is not JSON";
  // Grafana's import dialog asks for the data source only when the file declares it.
  ASSERT_TRUE(dashboard->get("__inputs"));
  ASSERT_EQ(dashboard->get("__inputs")->a.size(), 1u);
  EXPECT_EQ(dashboard->get("__inputs")->a[0].get("pluginId")->s, "prometheus");
  Shop f;
  Prometheus p(f.rb->admin_port());
  f.run(p);
  // The recorded series exist once the rules have been evaluated after the second round.
  ASSERT_TRUE(one_value(p, "rebound:retry_rate:ratio5m{dependency=\"api\"}")) << p.log();

  std::vector<std::pair<std::string, std::string>> queries;  // (what, PromQL)
  for (auto const& panel : dashboard->get("panels")->a) {
    if (!panel.get("targets")) continue;
    for (auto const& t : panel.get("targets")->a)
      queries.emplace_back(panel.get("title")->s, as_grafana_sends(t.get("expr")->s));
  }
  // label_values(metric{selector}, label) is Grafana's; the same question in PromQL.
  std::regex const label_values(R"(label_values\((.*), (\w+)\))");
  for (auto const& v : dashboard->get("templating")->get("list")->a) {
    if (v.get("type")->s != "query") continue;
    std::smatch m;
    auto const q = v.get("definition")->s;
    ASSERT_TRUE(std::regex_match(q, m, label_values)) << q;
    queries.emplace_back("variable " + v.get("name")->s,
                         as_grafana_sends("count by (" + m[2].str() + ") (" + m[1].str() + ")"));
  }
  EXPECT_GE(queries.size(), 20u);
  for (auto const& [what, promql] : queries) {
    SCOPED_TRACE(what + ": " + promql);
    std::optional<Json> answer;
    // A panel over a rate needs two scrapes after the traffic: the first query may be early.
    auto const answered = [&] {
      return answer && answer->get("status")->s == "success" && !answer->get("data")->get("result")->a.empty();
    };
    eventually([&] {
      answer = p.query(promql);
      return answered() || (answer && answer->get("error"));  // a query Prometheus refuses stays refused
    });
    EXPECT_TRUE(answered()) << (answer && answer->get("error") ? answer->get("error")->s : std::string("no series"));
  }
}

}  // namespace
}  // namespace itest::prometheus_test
