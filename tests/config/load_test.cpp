#include "config/load.hpp"
#include "config/describe.hpp"
#include "config/typed_values.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace rebound::config;
using namespace std::chrono_literals;

TEST(Load, EmptyFileGivesTheBuiltInDefaults) {
  auto c = load_config_text("", "t.yaml");
  EXPECT_EQ(c.listen.host, "127.0.0.1");
  EXPECT_EQ(c.listen.port, 3128);
  EXPECT_EQ(c.admin.port, 9901);
  EXPECT_EQ(c.workers, 0u);
  EXPECT_EQ(c.drain_timeout, 10s);
  EXPECT_EQ(c.unknown_hosts, unknown_hosts_policy::allow);
  EXPECT_EQ(c.defaults.attempt_timeout, 10s);
}

TEST(Load, ReadsTheForwardingKeys) {
  auto c = load_config_text(R"(
listen: 0.0.0.0:8080
admin: 127.0.0.1:9000
workers: 3
drain_timeout: 2s
unknown_hosts: deny
limits: {max_request_head: 16KiB, max_request_body: 1MiB, idle_timeout: 5s}
defaults: {attempt_timeout: 250ms}
dependencies:
  payments:
    hosts: [Payments.Internal, "payments.internal:8080"]
    attempt_timeout: 2s
)",
                            "t.yaml");
  EXPECT_EQ(c.listen.host, "0.0.0.0");
  EXPECT_EQ(c.listen.port, 8080);
  EXPECT_EQ(c.workers, 3u);
  EXPECT_EQ(c.drain_timeout, 2s);
  EXPECT_EQ(c.unknown_hosts, unknown_hosts_policy::deny);
  EXPECT_EQ(c.limits.max_request_head, 16u * 1024);
  EXPECT_EQ(c.limits.max_request_body, 1u << 20);
  EXPECT_EQ(c.limits.idle_timeout, 5s);
  EXPECT_EQ(c.defaults.attempt_timeout, 250ms);
  ASSERT_EQ(c.dependencies.size(), 1u);
  EXPECT_EQ(c.dependencies[0].effective.attempt_timeout, 2s);
}

TEST(Load, DependencyInheritsDefaultsWhereSilent) {
  auto c = load_config_text("defaults: {attempt_timeout: 3s}\ndependencies: {a: {hosts: [a.test]}}\n", "t.yaml");
  EXPECT_EQ(c.dependencies[0].effective.attempt_timeout, 3s);
}

TEST(Load, HostMatchingIsCaseInsensitiveAndPrefersHostPort) {
  auto c = load_config_text(R"(
dependencies:
  plain: {hosts: [api.test]}
  special: {hosts: ["API.test:8443"]}
)",
                            "t.yaml");
  ASSERT_NE(c.find_dependency("api.TEST", 80), nullptr);
  EXPECT_EQ(c.find_dependency("api.TEST", 80)->name, "plain");
  EXPECT_EQ(c.find_dependency("api.test", 8443)->name, "special");
  EXPECT_EQ(c.find_dependency("other.test", 80), nullptr);
  EXPECT_EQ(c.find_dependency("api.test", 65535)->name, "plain");
  // A host longer than the key's stack room is still looked up, not cut short.
  std::string const long_host(400, 'a');
  EXPECT_EQ(c.find_dependency(long_host, 80), nullptr);
  auto const long_known = load_config_text("dependencies: {far: {hosts: [\"" + long_host + ".test\"]}}\n", "t.yaml");
  ASSERT_NE(long_known.find_dependency(long_host + ".TEST", 443), nullptr);
}

TEST(Load, UnknownKeyIsAnErrorWithPositionAndSuggestion) {
  auto d = errors_of("listen: 127.0.0.1:1\nworkrs: 2\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].line, 2);
  EXPECT_EQ(d[0].column, 1);
  EXPECT_EQ(d[0].path, "workrs");
  EXPECT_NE(d[0].message.find("did you mean \"workers\""), std::string::npos) << d[0].message;
  EXPECT_EQ(to_string(d[0]).rfind("t.yaml:2:1: workrs: unknown key", 0), 0u) << to_string(d[0]);
}

TEST(Load, WrongValueNamesKeyGivenValueAndWhatIsAccepted) {
  auto d = errors_of("defaults:\n  attempt_timeout: 10\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "defaults.attempt_timeout");
  EXPECT_EQ(d[0].line, 2);
  EXPECT_EQ(d[0].column, 20);
  EXPECT_NE(d[0].message.find("\"10\""), std::string::npos);
  EXPECT_NE(d[0].message.find("250ms"), std::string::npos);
}

TEST(Load, ReportsEveryProblemNotJustTheFirst) {
  auto d = errors_of("listen: nowhere\nworkers: many\nunknown_hosts: maybe\n");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].path, "listen");
  EXPECT_EQ(d[1].path, "workers");
  EXPECT_EQ(d[2].path, "unknown_hosts");
}

TEST(Load, MalformedYamlIsReportedWithPositionAndMarkedMalformed) {
  try {
    load_config_text("listen: [1,\n", "t.yaml");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_TRUE(e.malformed());
    EXPECT_GT(e.diagnostics().at(0).line, 0);
  }
}

TEST(Load, SameHostInTwoDependenciesIsAnError) {
  auto d = errors_of("dependencies:\n  a: {hosts: [x.test]}\n  b: {hosts: [X.test]}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].message.find("already belongs to dependency \"a\""), std::string::npos);
}

// Found by fuzz_config: the index of a dependency not yet in the list was read back.
TEST(Load, SameHostTwiceInOneDependencyIsAnErrorNotACrash) {
  auto d = errors_of("dependencies:\n  a: {hosts: [x.test, X.test]}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].message.find("already belongs to dependency \"a\""), std::string::npos) << d[0].message;
  EXPECT_EQ(d[0].path, "dependencies.a.hosts[1]");
}

TEST(Load, ZeroTimeoutsAreRefused) {
  // The finding must be about the zero itself, not some other key of the file.
  auto a = errors_of("defaults: {attempt_timeout: 0s}\n");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].path, "defaults.attempt_timeout");
  auto i = errors_of("limits: {idle_timeout: 0s}\n");
  ASSERT_EQ(i.size(), 1u);
  EXPECT_EQ(i[0].path, "limits.idle_timeout");
}

TEST(Load, UnreadableFileIsMalformed) {
  try {
    load_config_file("/nonexistent/rebound.yaml");
    FAIL();
  } catch (const config_error& e) {
    EXPECT_TRUE(e.malformed());
  }
}

TEST(Load, DuplicateKeyIsAnErrorNamingTheFirst) {
  // yaml-cpp keeps the first of two equal keys without a word; the second would be ignored.
  auto d = errors_of("defaults:\n  backoff: {base: 10ms}\n  backoff: {base: 5s}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "defaults.backoff");
  EXPECT_EQ(d[0].line, 3);
  EXPECT_NE(d[0].message.find("duplicate key \"backoff\" (first at line 2)"), std::string::npos) << d[0].message;
}

TEST(Load, AdminTakesAListenAddressAndATokenFile) {
  auto c = load_config_text("admin: {listen: 127.0.0.1:9911, token_file: /dev/null}\n", "t.yaml");
  EXPECT_EQ(c.admin.port, 9911);
  EXPECT_EQ(c.admin_token_file, "/dev/null");
  EXPECT_EQ(load_config_text("admin: 127.0.0.1:9912\n", "t.yaml").admin.port, 9912) << "the plain form stays";
}

TEST(Load, AdminAllowedHostsAreNamesReadInLowerCase) {
  auto c = load_config_text("admin: {listen: 127.0.0.1:9911, allowed_hosts: [Rebound.Internal, .svc.cluster.local]}\n",
                            "t.yaml");
  EXPECT_EQ(c.admin_allowed_hosts, (std::vector<std::string>{"rebound.internal", ".svc.cluster.local"}));
  auto const d = errors_of("admin: {listen: 127.0.0.1:9911, allowed_hosts: [\"http://x.example\", \"a:1\"]}\n");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].path, "admin.allowed_hosts[0]");
  EXPECT_EQ(d[1].path, "admin.allowed_hosts[1]");
  EXPECT_EQ(errors_of("admin: {listen: 127.0.0.1:9911, allowed_hosts: x.example}\n").size(), 1u) << "a list";
}

TEST(Load, AnAdminBeyondLoopbackWithoutATokenIsAWarning) {
  std::vector<diagnostic> warnings;
  load_config_text("admin: 0.0.0.0:9901\n", "t.yaml", &warnings);
  EXPECT_TRUE(warnings.empty()) << "nothing handed over: the admin API has no writes";
  load_config_text("admin: 0.0.0.0:9901\nstore: {path: /tmp/x.db}\n", "t.yaml", &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].message.find("token_file"), std::string::npos) << warnings[0].message;
  EXPECT_NE(warnings[0].message.find("a dependency's credentials"), std::string::npos)
      << "the warning says what an intruder could do: " << warnings[0].message;
  warnings.clear();
  load_config_text("admin: {listen: 0.0.0.0:9901, token_file: /dev/null}\nstore: {path: /tmp/x.db}\n", "t.yaml",
                   &warnings);
  EXPECT_TRUE(warnings.empty());
}

TEST(Load, R8_DeadLetterOffOnAWebhookRouteIsAnErrorAtItsLine) {
  try {
    load_config_text("dependencies:\n  hooks:\n    hosts: [h.test]\n    context: webhook\n    dead_letter: off\n",
                     "t.yaml");
    FAIL() << "loaded";
  } catch (const config_error& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
    EXPECT_EQ(e.diagnostics()[0].rule, "R-8");
    EXPECT_EQ(e.diagnostics()[0].path, "dependencies.hooks.dead_letter");
    EXPECT_EQ(e.diagnostics()[0].line, 5);
  }
}

TEST(Load, ARegisteredPolicyIsReadAsAsyncByTheSameRules) {
  auto const p = load_policy_text(R"({"max_retries": 4, "backoff": {"base": "1s", "cap": "1m"}})", "policy");
  EXPECT_EQ(p.context, context_kind::async);
  EXPECT_EQ(p.max_retries, 4u);
  EXPECT_EQ(p.backoff.cap, std::chrono::minutes(1));
  EXPECT_THROW(load_policy_text(R"({"backoff": {"jitter": "equal"}})", "policy"), config_error);
  EXPECT_THROW(load_policy_text(R"({"hosts": ["a"]})", "policy"), config_error) << "policy keys only";
  EXPECT_THROW(load_policy_text(R"([1, 2])", "policy"), config_error);
  EXPECT_THROW(load_policy_text(R"({"max_retries": )", "policy"), config_error);
}

TEST(Load, AnAlertWebhookMustBeAnAbsoluteHttpUrl) {
  EXPECT_EQ(load_config_text("alert: {webhook: \"http://alerts.test/dlq\"}\n", "t.yaml").alert_webhook,
            "http://alerts.test/dlq");
  EXPECT_THROW(load_config_text("alert: {webhook: /dlq}\n", "t.yaml"), config_error);
  EXPECT_THROW(load_config_text("alert: {webhook: \"https://alerts.test/\"}\n", "t.yaml"), config_error);
  EXPECT_THROW(load_config_text("alert: {hook: x}\n", "t.yaml"), config_error);
}

/// No OTEL_* variable, whatever the test runner's environment holds.
const environment no_environment = [](std::string_view) -> std::optional<std::string> {
  return std::nullopt;
};

TEST(Load, TracingIsOffUntilACollectorIsNamed) {
  auto const off = load_config_text("service: s\n", "t.yaml");
  EXPECT_FALSE(off.tracing.endpoint);
  auto const on = load_config_text(
      "tracing: {endpoint: \"http://127.0.0.1:4318/v1/traces\", sample_ratio: 0.25, max_queue: 100, timeout: 2s}\n",
      "t.yaml", nullptr, no_environment);
  ASSERT_TRUE(on.tracing.endpoint);
  EXPECT_EQ(on.tracing.endpoint->origin.port, 4318);
  EXPECT_EQ(on.tracing.endpoint->target, "/v1/traces");
  EXPECT_EQ(on.tracing.sample_ratio, 0.25);
  EXPECT_EQ(on.tracing.max_queue, 100u);
  EXPECT_EQ(on.tracing.timeout, std::chrono::seconds(2));
  auto const json = effective_config_json(on);
  EXPECT_EQ(effective_config_json(load_config_text(json, "effective.json", nullptr, no_environment)), json)
      << "round trip: " << json;
  // Issue 48: a hosted back end is reached over TLS, verified.
  auto const tls = load_config_text("tracing: {endpoint: \"https://otlp.example.com/v1/traces\", ca_file: /ca.pem}\n",
                                    "t.yaml", nullptr, no_environment);
  ASSERT_TRUE(tls.tracing.endpoint);
  EXPECT_EQ(tls.tracing.endpoint->origin.scheme, "https");
  EXPECT_EQ(tls.tracing.endpoint->origin.port, 443);
  EXPECT_EQ(tls.tracing.ca_file, "/ca.pem");
  for (auto const* bad :
       {"tracing: {endpoint: \"ftp://collector/v1/traces\"}\n", "tracing: {endpoint: /v1/traces}\n",
        "tracing: {endpoint: \"http://c:4318/\", timeout: 0s}\n",
        "tracing: {endpoint: \"http://c:4318/\", sample_ratio: 2}\n",
        "tracing: {endpoint: \"http://c:4318/\", max_queue: 0}\n", "tracing: {endpont: x}\n"})
    EXPECT_THROW(load_config_text(bad, "t.yaml", nullptr, no_environment), config_error) << bad;
}

// Issue 48: OpenTelemetry's variables configure the exporter as they do every other
// OpenTelemetry component, where the YAML is silent.
TEST(Load, OpenTelemetrysVariablesFillWhatTheYamlLeavesOut) {
  std::map<std::string, std::string, std::less<>> vars{
      {"OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example.com:4318"},
      {"OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cr%3Dt, x-team = shop"},
      {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
      {"OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"},
      {"OTEL_SERVICE_NAME", "checkout"},
      {"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,k8s.pod.name=shop-0"},
      {"OTEL_TRACES_SAMPLER", "parentbased_traceidratio"},
      {"OTEL_TRACES_SAMPLER_ARG", "0.1"}};
  environment const env = [&vars](std::string_view name) -> std::optional<std::string> {
    if (auto it = vars.find(name); it != vars.end()) return it->second;
    return std::nullopt;
  };
  auto const c = load_config_text("listen: 127.0.0.1:3128\n", "t.yaml", nullptr, env);
  ASSERT_TRUE(c.tracing.endpoint);
  EXPECT_EQ(format_service_url(*c.tracing.endpoint), "https://otlp.example.com:4318/v1/traces")
      << "the generic endpoint is a base: v1/traces is added";
  EXPECT_EQ(c.tracing.headers, (std::vector<std::pair<std::string, std::string>>{{"x-api-key", "s3cr=t"},
                                                                                  {"x-team", "shop"}}));
  EXPECT_EQ(c.tracing.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(c.tracing.ca_file, "/etc/ca.pem");
  EXPECT_EQ(c.tracing.service_name, "checkout");
  EXPECT_EQ(c.tracing.resource.size(), 2u);
  EXPECT_EQ(c.tracing.sample_ratio, 0.1);
  EXPECT_TRUE(c.tracing.follow_caller);
  EXPECT_EQ(effective_config_json(c).find("s3cr"), std::string::npos) << "R-9: header values never shown";

  // The YAML wins where both speak; the signal's own variable wins over the generic one.
  vars["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://collector:4318/custom";
  vars["OTEL_TRACES_SAMPLER"] = "traceidratio";
  auto const both = load_config_text(
      "service: payments\ntracing: {sample_ratio: 0.5, timeout: 1s}\n", "t.yaml", nullptr, env);
  EXPECT_EQ(format_service_url(*both.tracing.endpoint), "http://collector:4318/custom");
  EXPECT_EQ(both.tracing.sample_ratio, 0.5);
  EXPECT_FALSE(both.tracing.follow_caller) << "traceidratio decides every trace itself";
  EXPECT_EQ(both.tracing.timeout, std::chrono::seconds(1));
  EXPECT_EQ(both.tracing.service_name, "") << "service: in the YAML names the spans";
  auto const yaml_endpoint = load_config_text("tracing: {endpoint: \"http://mine:4318/v1/traces\"}\n", "t.yaml",
                                              nullptr, env);
  EXPECT_EQ(format_service_url(*yaml_endpoint.tracing.endpoint), "http://mine:4318/v1/traces");

  vars["OTEL_SDK_DISABLED"] = "true";
  EXPECT_FALSE(load_config_text("tracing: {endpoint: \"http://mine:4318/v1/traces\"}\n", "t.yaml", nullptr, env)
                   .tracing.endpoint)
      << "OTEL_SDK_DISABLED turns tracing off";
  vars.erase("OTEL_SDK_DISABLED");

  // A malformed variable refuses the start as a bad key does, naming the variable.
  for (auto const& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign"},
           {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "bad name=x"},
           {"OTEL_EXPORTER_OTLP_TIMEOUT", "5s"},
           {"OTEL_TRACES_SAMPLER", "sometimes"},
           {"OTEL_SDK_DISABLED", "maybe"},
           {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318"}}) {
    auto const before = vars;
    vars[name] = value;
    try {
      load_config_text("listen: 127.0.0.1:3128\n", "t.yaml", nullptr, env);
      ADD_FAILURE() << name << "=" << value << " was taken";
    } catch (const config_error& e) {
      EXPECT_EQ(e.diagnostics().at(0).path, name);
      EXPECT_EQ(e.diagnostics().at(0).file, "environment");
    }
    vars = before;
  }
  std::vector<diagnostic> warnings;
  vars["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc";
  load_config_text("listen: 127.0.0.1:3128\n", "t.yaml", &warnings, env);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].path, "OTEL_EXPORTER_OTLP_PROTOCOL") << "said, not refused: rebound speaks http/json";
}

// Issue 29, defect 9: a key whose request may be at the app stays claimed for claim_lease.
TEST(Load, R6_InboundClaimLeaseDefaultsToAMinuteAndIsNeverShorterThanTheAttempt) {
  auto const base = std::string("inbound:\n  listen: 127.0.0.1:8080\n  app: 127.0.0.1:3000\n");
  EXPECT_EQ(load_config_text(base, "t.yaml").inbound.claim_lease, std::chrono::seconds(60));
  EXPECT_EQ(load_config_text(base + "  attempt_timeout: 90s\n", "t.yaml").inbound.claim_lease,
            std::chrono::seconds(90));
  EXPECT_EQ(load_config_text(base + "  claim_lease: 5m\n", "t.yaml").inbound.claim_lease, std::chrono::minutes(5));
  try {
    load_config_text(base + "  attempt_timeout: 10s\n  claim_lease: 5s\n", "t.yaml");
    ADD_FAILURE() << "a lease shorter than the attempt was loaded";
  } catch (const config_error& e) {
    EXPECT_EQ(e.diagnostics()[0].path, "inbound.claim_lease");
    EXPECT_EQ(e.diagnostics()[0].rule, "R-6");
  }
}

TEST(Load, R6_InboundKeysAndEventsAreKeptAtLeastAsLongAsTheStandardSays) {
  auto const c = load_config_text(R"(
inbound:
  listen: 127.0.0.1:8080
  app: 127.0.0.1:3000
  routes:
    - match: {path_prefix: /refunds, methods: [POST]}
      idempotency: {require: true, ttl: 48h, scope: route, mismatch_status: 409}
    - match: {path_prefix: /webhooks}
      dedupe: {header: webhook-id}
)",
                                  "t.yaml");
  ASSERT_EQ(c.inbound.routes.size(), 2u);
  EXPECT_TRUE(c.inbound.needs_store());
  EXPECT_TRUE(c.needs_store());
  auto const& r = c.inbound.routes[0];
  EXPECT_TRUE(r.idempotency.require);
  EXPECT_EQ(r.idempotency.ttl, std::chrono::hours(48));
  EXPECT_FALSE(r.idempotency.scope_principal);
  EXPECT_EQ(r.idempotency.mismatch_status, 409u);
  EXPECT_EQ(c.inbound.routes[1].dedupe.ttl, std::chrono::hours(24 * 7));
  EXPECT_EQ(c.inbound.route_for("POST", "/refunds/1"), &r);
  EXPECT_EQ(c.inbound.route_for("GET", "/refunds/1"), nullptr);
  EXPECT_EQ(c.inbound.forward.max_retries, 0u) << "one layer retries: the caller's";
  auto refused = [](const std::string& route) {
    try {
      load_config_text("inbound:\n  listen: 127.0.0.1:8080\n  app: 127.0.0.1:3000\n  routes:\n" + route, "t.yaml");
    } catch (const config_error& e) {
      return e.diagnostics()[0].rule + " " + e.diagnostics()[0].path;
    }
    return std::string("loaded");
  };
  EXPECT_EQ(refused("    - idempotency: {ttl: 1h}\n"), "R-6 inbound.routes[0].idempotency.ttl");
  EXPECT_EQ(refused("    - dedupe: {header: X-Event-ID, ttl: 24h}\n"), "R-6 inbound.routes[0].dedupe.ttl");
  EXPECT_EQ(refused("    - idempotency: {mismatch_status: 400}\n"), " inbound.routes[0].idempotency.mismatch_status");
  EXPECT_EQ(refused("    - match: {path_prefix: /x}\n"), " inbound.routes[0]");
  EXPECT_EQ(refused("    - dedupe: {ttl: 168h}\n"), " inbound.routes[0].dedupe.header");
}

TEST(Load, APostgresStoreReadsItsKeys) {
  auto c = load_config_text(R"(
store: {type: postgres, dsn: "host=db.internal dbname=rebound user=rebound", password_file: /dev/null, pool: 8, lease: 90s}
)",
                            "t.yaml");
  EXPECT_EQ(c.store.type, config::store_settings::kind::postgres);
  EXPECT_EQ(c.store.dsn, "host=db.internal dbname=rebound user=rebound");
  EXPECT_EQ(c.store.password_file, "/dev/null");
  EXPECT_EQ(c.store.pool, 8u);
  EXPECT_EQ(c.store.lease, 90s);
  EXPECT_TRUE(c.needs_store());
}

TEST(Load, StoreMaxSizeIsOneGibByDefaultZeroForNoBoundAndAtLeastOneMib) {
  EXPECT_EQ(load_config_text("store: {path: /tmp/x.db}\n", "t.yaml").store.max_size, 1ull << 30);
  EXPECT_EQ(load_config_text("store: {path: /tmp/x.db, max_size: 20GiB}\n", "t.yaml").store.max_size, 20ull << 30);
  EXPECT_EQ(load_config_text("store: {path: /tmp/x.db, max_size: 0}\n", "t.yaml").store.max_size, 0u);
  EXPECT_EQ(errors_of("store: {path: /tmp/x.db, max_size: 512KiB}\n").at(0).path, "store.max_size");
  EXPECT_EQ(errors_of("store: {path: /tmp/x.db, max_size: lots}\n").at(0).path, "store.max_size");
}

TEST(Load, InboundPrincipalHeaderIsAuthorizationByDefaultAndMustBeAFieldName) {
  std::string const base = "store: {path: /tmp/x.db}\ninbound:\n  listen: 127.0.0.1:0\n  app: 127.0.0.1:3000\n";
  EXPECT_EQ(load_config_text(base, "t.yaml").inbound.principal_header, "Authorization");
  EXPECT_EQ(load_config_text(base + "  principal_header: X-User-Id\n", "t.yaml").inbound.principal_header, "X-User-Id");
  EXPECT_EQ(errors_of(base + "  principal_header: \"X User\"\n").at(0).path, "inbound.principal_header");
  EXPECT_EQ(errors_of(base + "  principal_header: \"X-User:\"\n").at(0).path, "inbound.principal_header");
}

TEST(Load, R9_APasswordInTheDsnIsRefused) {
  auto const d = errors_of("store: {type: postgres, dsn: \"host=db user=r password=hunter2\"}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "store.dsn");
  EXPECT_EQ(d[0].rule, "R-9");
  EXPECT_EQ(d[0].message.find("hunter2"), std::string::npos) << "the refusal does not repeat the secret";
}

TEST(Load, APostgresStoreIsRefusedWithoutADsnOrWithOneThatDoesNotParse) {
  EXPECT_EQ(errors_of("store: {type: postgres}\n").at(0).path, "store.dsn");
  EXPECT_EQ(errors_of("store: {type: postgres, dsn: \"host='unterminated\"}\n").at(0).path, "store.dsn");
  EXPECT_EQ(errors_of("store: {type: mysql}\n").at(0).path, "store.type");
  EXPECT_EQ(errors_of("store: {type: sqlite, dsn: \"host=db\"}\n").at(0).path, "store.dsn")
      << "a key of the other type is a mistake, not ignored";
  EXPECT_EQ(errors_of("store: {type: postgres, dsn: \"host=db\", pool: 0}\n").at(0).path, "store.pool");
}

TEST(Load, ALeaseThatAnAttemptCanOutlastIsRefused) {
  auto const d = errors_of(R"(
store: {type: postgres, dsn: "host=db", lease: 20s}
dependencies:
  slow: {hosts: [slow.internal], attempt_timeout: 30s}
)");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "store.lease");
  EXPECT_NE(d[0].message.find("30s"), std::string::npos) << d[0].message;
  EXPECT_TRUE(errors_of("store: {type: postgres, dsn: \"host=db\", lease: 15s}\n").empty())
      << "10s (the default attempt_timeout) + 5s";
}

// Issue 22: one layer retries. Off unless a policy says so; route over dependency over defaults.
TEST(Load, RetryLayeredIsOffByDefaultAndResolvedLikeAnyPolicyKey) {
  auto const c = load_config_text(R"(
defaults: {retry_layered: true}
dependencies:
  edge:
    hosts: [edge.test]
    retry_layered: false
    routes:
      - match: {path_prefix: /chain}
        retry_layered: true
  plain:
    hosts: [plain.test]
)",
                                  "t.yaml");
  EXPECT_FALSE(default_config().defaults.retry_layered);
  EXPECT_FALSE(load_config_text("", "t.yaml").defaults.retry_layered);
  EXPECT_TRUE(c.defaults.retry_layered);
  EXPECT_FALSE(c.dependencies.at(0).effective.retry_layered);
  EXPECT_TRUE(c.dependencies.at(0).routes.at(0).effective.retry_layered);
  EXPECT_TRUE(c.dependencies.at(1).effective.retry_layered);
}

TEST(Load, RetryLayeredMustBeABooleanAtItsLine) {
  for (auto const* value : {"yes", "1", "sometimes", "[true]"}) {
    SCOPED_TRACE(value);
    try {
      load_config_text(std::string("dependencies:\n  edge:\n    hosts: [edge.test]\n    retry_layered: ") + value + "\n",
                       "t.yaml");
      FAIL() << "loaded";
    } catch (const config_error& e) {
      ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
      EXPECT_EQ(e.diagnostics()[0].path, "dependencies.edge.retry_layered");
      EXPECT_EQ(e.diagnostics()[0].line, 4);
      auto const& m = e.diagnostics()[0].message;
      EXPECT_TRUE(m.find("true or false") != std::string::npos || m.find("single value") != std::string::npos)
          << e.what();
    }
  }
}

// Issue 32: WebSocket upgrades pass by default; a route may refuse them.
TEST(Load, UpgradesAllowWebSocketByDefaultAndARouteMayRefuse) {
  auto const c = load_config_text(R"(
dependencies:
  chat:
    hosts: [chat.test]
    routes:
      - match: {path_prefix: /no-ws}
        upgrades: []
      - match: {path_prefix: /ws}
        upgrades: [websocket]
)",
                                  "t.yaml");
  EXPECT_TRUE(default_config().defaults.websocket_upgrades);
  EXPECT_TRUE(c.dependencies.at(0).effective.websocket_upgrades);
  EXPECT_FALSE(c.dependencies.at(0).routes.at(0).effective.websocket_upgrades);
  EXPECT_TRUE(c.dependencies.at(0).routes.at(1).effective.websocket_upgrades);
}

TEST(Load, UpgradesNameOnlyWebSocketAtTheirLine) {
  for (auto const* value : {"[h2c]", "[websocket, foo]", "websocket"}) {
    SCOPED_TRACE(value);
    try {
      load_config_text(std::string("dependencies:\n  chat:\n    hosts: [chat.test]\n    upgrades: ") + value + "\n",
                       "t.yaml");
      FAIL() << "loaded";
    } catch (const config_error& e) {
      ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
      EXPECT_EQ(e.diagnostics()[0].line, 4);
      EXPECT_EQ(e.diagnostics()[0].path.rfind("dependencies.chat.upgrades", 0), 0u) << e.diagnostics()[0].path;
    }
  }
}
