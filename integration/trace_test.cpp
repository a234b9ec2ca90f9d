// Issue 34, part 3: traces through the real binary. A scripted OTLP/HTTP collector receives
// what rebound exports and the test reads it field by field: one trace per request, continued
// from the caller's traceparent, a span per attempt whose id went upstream, attributes typed as
// OTLP says. A collector that is down or never answers makes no request wait.
#include "async_helpers.hpp"
#include "grpc_peers.hpp"
#include "test_pki.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <map>
#include <thread>

namespace itest::trace_test {
namespace {

constexpr std::string_view caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr std::string_view caller_span = "00f067aa0ba902b7";

std::string caller_traceparent(bool sampled = true) {
  return "00-" + std::string(caller_trace) + "-" + std::string(caller_span) + (sampled ? "-01" : "-00");
}

ReboundOptions traced(const ScriptedUpstream& up, std::uint16_t collector, const std::string& more = {}) {
  ReboundOptions o;
  o.extra = "service: shop\ntracing:\n  endpoint: http://127.0.0.1:" + std::to_string(collector) + "/v1/traces\n" +
            more + "defaults:\n  backoff: {base: 1ms, cap: 5ms}\ndependencies:\n  payments:\n    hosts: [\"" +
            up.authority() + "\"]\n";
  return o;
}

/// Every span the collector received, in the order they came.
std::vector<boost::json::object> spans_of(const ScriptedUpstream& collector) {
  std::vector<boost::json::object> out;
  for (auto const& r : collector.requests()) {
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.header("Content-Type").value_or(""), "application/json");
    boost::system::error_code ec;
    auto const doc = boost::json::parse(r.body, ec);
    if (ec) {
      ADD_FAILURE() << "not JSON: " << r.body;
      continue;
    }
    for (auto const& rs : doc.at("resourceSpans").as_array())
      for (auto const& ss : rs.at("scopeSpans").as_array())
        for (auto const& s : ss.at("spans").as_array()) out.push_back(s.as_object());
  }
  return out;
}

/// Polls the collector (10 s at most) until it holds `n` spans of `trace`.
std::vector<boost::json::object> wait_for_spans(const ScriptedUpstream& collector, std::string_view trace,
                                                std::size_t n) {
  std::vector<boost::json::object> of_trace;
  for (int i = 0; i < 100; ++i) {
    of_trace.clear();
    for (auto& s : spans_of(collector))
      if (s.at("traceId").as_string() == trace) of_trace.push_back(std::move(s));
    if (of_trace.size() >= n) break;
    std::this_thread::sleep_for(100ms);
  }
  return of_trace;
}

/// The value object of attribute `key`, or null.
const boost::json::object* attribute(const boost::json::object& span, std::string_view key) {
  for (auto const& a : span.at("attributes").as_array())
    if (a.at("key").as_string() == key) return &a.at("value").as_object();
  return nullptr;
}

std::string int_attribute(const boost::json::object& span, std::string_view key) {
  auto const* v = attribute(span, key);
  return v && v->contains("intValue") ? std::string(v->at("intValue").as_string()) : std::string("<none>");
}

std::string string_attribute(const boost::json::object& span, std::string_view key) {
  auto const* v = attribute(span, key);
  return v && v->contains("stringValue") ? std::string(v->at("stringValue").as_string()) : std::string("<none>");
}

std::uint64_t nanos(const boost::json::object& span, std::string_view key) {
  return std::stoull(std::string(span.at(key).as_string()));
}

TEST(Tracing, Seed004_ARetriedRequestIsOneTraceWithASpanPerAttempt) {
  ScriptedUpstream up;
  up.on_sequence("/pay", {respond(503), respond(200)});
  ScriptedUpstream collector;
  collector.on("/v1/traces", respond(200));
  ReboundProcess rb(traced(up, collector.port()));
  HttpClient client(rb.port());
  auto const r = client.request("POST", "http://" + up.authority() + "/pay?card=secret",
                                {{"traceparent", caller_traceparent()}, {"Idempotency-Key", "k-77"}}, "{}");
  ASSERT_EQ(r.status, 200u);

  auto const spans = wait_for_spans(collector, caller_trace, 3);
  ASSERT_EQ(spans.size(), 3u) << rb.stdout_text();
  boost::json::object request;
  std::vector<boost::json::object> attempts;
  for (auto const& s : spans) {
    if (s.at("kind").as_int64() == 2)
      request = s;
    else
      attempts.push_back(s);
  }
  ASSERT_EQ(attempts.size(), 2u);
  std::sort(attempts.begin(), attempts.end(),
            [](auto const& a, auto const& b) { return int_attribute(a, "attempt") < int_attribute(b, "attempt"); });

  // The request's span continues the caller's trace, under the caller's span.
  EXPECT_EQ(request.at("parentSpanId").as_string(), caller_span);
  EXPECT_EQ(request.at("spanId").as_string().size(), 16u);
  EXPECT_EQ(string_attribute(request, "rebound.dependency"), "payments");
  EXPECT_EQ(string_attribute(request, "idempotency_key"), "k-77");
  EXPECT_EQ(string_attribute(request, "url.path"), "/pay") << "never the query (R-9)";
  EXPECT_EQ(string_attribute(request, "url.scheme"), "http");
  EXPECT_EQ(string_attribute(request, "http.request.method"), "POST");
  EXPECT_EQ(int_attribute(request, "rebound.attempts"), "2");
  EXPECT_EQ(int_attribute(request, "http.response.status_code"), "200");
  EXPECT_NE(string_attribute(request, "rebound.correlation_id"), "<none>");
  EXPECT_EQ(attribute(request, "url.full"), nullptr) << "a SERVER span has no url.full";

  // Each attempt is the request's child, tagged as seed 004 asks, its id sent upstream.
  auto const sent = up.requests();
  ASSERT_EQ(sent.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    auto const& a = attempts[i];
    SCOPED_TRACE("attempt " + std::to_string(i + 1));
    EXPECT_EQ(a.at("parentSpanId").as_string(), request.at("spanId").as_string());
    EXPECT_EQ(int_attribute(a, "attempt"), std::to_string(i + 1));
    EXPECT_EQ(string_attribute(a, "idempotency_key"), "k-77");
    EXPECT_EQ(string_attribute(a, "rebound.dependency"), "payments");
    EXPECT_EQ(int_attribute(a, "http.response.status_code"), i == 0 ? "503" : "200");
    EXPECT_NE(int_attribute(a, "rebound.retry.wait_ms"), "<none>");
    // OpenTelemetry's HTTP client attributes (semantic conventions 1.26).
    EXPECT_EQ(string_attribute(a, "http.request.method"), "POST");
    EXPECT_EQ(string_attribute(a, "url.full"), "http://" + up.authority() + "/pay") << "never the query (R-9)";
    EXPECT_EQ(string_attribute(a, "server.address"), "127.0.0.1");
    EXPECT_EQ(int_attribute(a, "server.port"), std::to_string(up.port()));
    EXPECT_EQ(int_attribute(a, "http.request.resend_count"), i == 0 ? "<none>" : "1");
    for (auto const* old : {"dependency", "error_type", "correlation_id", "retry.wait_ms"})
      EXPECT_EQ(attribute(a, old), nullptr) << old << ": rebound's own names live under rebound.";
    EXPECT_EQ(sent[i].header("traceparent").value_or(""),
              "00-" + std::string(caller_trace) + "-" + std::string(a.at("spanId").as_string()) + "-01")
        << "the upstream sees the attempt's own span as its parent";
    EXPECT_LE(nanos(a, "startTimeUnixNano"), nanos(a, "endTimeUnixNano"));
    EXPECT_LE(nanos(request, "startTimeUnixNano"), nanos(a, "startTimeUnixNano"));
    EXPECT_LE(nanos(a, "endTimeUnixNano"), nanos(request, "endTimeUnixNano"));
  }
  EXPECT_EQ(string_attribute(attempts[0], "error.type"), "http_503");
  EXPECT_EQ(attribute(attempts[1], "error.type"), nullptr);
  EXPECT_EQ(attempts[0].at("status").at("code").as_int64(), 2) << "a failed attempt is an error span";
  EXPECT_TRUE(attempts[1].at("status").as_object().empty());
  EXPECT_LE(nanos(attempts[0], "endTimeUnixNano"), nanos(attempts[1], "startTimeUnixNano"));
  EXPECT_NE(sent[0].header("traceparent"), sent[1].header("traceparent"));
}

/// `payments` as a webhook dependency whose calls are handed over, retried within milliseconds.
ReboundOptions traced_webhooks(const ScriptedUpstream& up, std::uint16_t collector, const store_dir& store) {
  auto o = traced(up, collector, store.yaml());
  o.extra += "    context: webhook\n    backoff: {base: 10ms, cap: 20ms}\n";
  return o;
}

/// A task's spans, sorted into its own (kind SERVER) and its attempts' (kind CLIENT).
struct task_spans {
  boost::json::object task;
  std::vector<boost::json::object> attempts;
};

task_spans sorted(const std::vector<boost::json::object>& spans) {
  task_spans out;
  for (auto const& s : spans) {
    if (s.at("kind").as_int64() == 2)
      out.task = s;
    else
      out.attempts.push_back(s);
  }
  return out;
}

TEST(Tracing, Seed004_AHandedOverCallsDeliveriesShareTheCallersTrace) {
  ScriptedUpstream up;
  up.on_sequence("/hook", {respond(503), respond(200)});
  ScriptedUpstream collector;
  collector.on("/v1/traces", respond(200));
  store_dir const store;
  ReboundProcess rb(traced_webhooks(up, collector.port(), store));
  auto const r = raw_exchange(
      rb.port(),
      absolute_request("POST", up.authority(), "/hook",
                       "Content-Type: application/json\r\ntraceparent: " + caller_traceparent() + "\r\n", "{}"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 202u) << r->body;
  auto const spans = sorted(wait_for_spans(collector, caller_trace, 3));
  ASSERT_EQ(spans.attempts.size(), 2u) << rb.stdout_text();
  ASSERT_FALSE(spans.task.empty()) << "the task's own span, recorded when it ended";
  EXPECT_EQ(spans.task.at("parentSpanId").as_string(), caller_span) << "the task hangs under the caller's span";
  EXPECT_EQ(int_attribute(spans.task, "rebound.attempts"), "2");
  EXPECT_EQ(int_attribute(spans.task, "http.response.status_code"), "200");
  auto const sent = up.requests();
  ASSERT_EQ(sent.size(), 2u);
  for (auto const& s : spans.attempts) {
    EXPECT_EQ(s.at("parentSpanId").as_string(), spans.task.at("spanId").as_string())
        << "each delivery hangs under the task's span";
    EXPECT_EQ(string_attribute(s, "rebound.dependency"), "payments");
    EXPECT_EQ(string_attribute(s, "rebound.task_id"), string_attribute(spans.task, "rebound.task_id"));
    EXPECT_NE(string_attribute(s, "idempotency_key"), "<none>") << "R-6: every task carries its key";
    EXPECT_EQ(string_attribute(s, "url.full"), "http://" + up.authority() + "/hook");
    auto const n = std::stoul(int_attribute(s, "attempt"));
    ASSERT_TRUE(n == 1 || n == 2);
    EXPECT_EQ(int_attribute(s, "http.response.status_code"), n == 1 ? "503" : "200");
    EXPECT_EQ(sent[n - 1].header("traceparent").value_or(""),
              "00-" + std::string(caller_trace) + "-" + std::string(s.at("spanId").as_string()) + "-01");
    EXPECT_LE(nanos(spans.task, "startTimeUnixNano"), nanos(s, "startTimeUnixNano"));
    EXPECT_LE(nanos(s, "endTimeUnixNano"), nanos(spans.task, "endTimeUnixNano"));
  }
}

// Issue 48: without a caller's trace, a task's attempts were each a root of the trace its id
// names, and back ends reported a missing root. The task's span is the one root now.
TEST(Tracing, AHandedOverCallWithoutATraceHasOneRootTheTasksSpan) {
  ScriptedUpstream up;
  up.on_sequence("/hook", {respond(503), respond(503), respond(400)});
  ScriptedUpstream collector;
  collector.on("/v1/traces", respond(200));
  store_dir const store;
  ReboundProcess rb(traced_webhooks(up, collector.port(), store));
  auto const id = accepted_task(raw_exchange(rb.port(), post(up.authority(), "/hook", "{}")), rb);
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(status_of(task_until(rb, id, "DEAD_LETTERED")), "DEAD_LETTERED");
  std::vector<boost::json::object> spans;
  for (int i = 0; i < 100 && spans.size() < 4; ++i) {
    spans = spans_of(collector);
    if (spans.size() < 4) std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(spans.size(), 4u) << rb.stdout_text();
  auto const task = sorted(spans);
  ASSERT_EQ(task.attempts.size(), 3u);
  std::size_t roots = 0;
  for (auto const& s : spans) {
    EXPECT_EQ(s.at("traceId").as_string(), task.task.at("traceId").as_string()) << "one trace per task";
    if (!s.contains("parentSpanId") || s.at("parentSpanId").as_string().empty()) ++roots;
  }
  EXPECT_EQ(roots, 1u);
  for (auto const& a : task.attempts) EXPECT_EQ(a.at("parentSpanId").as_string(), task.task.at("spanId").as_string());
  EXPECT_EQ(string_attribute(task.task, "rebound.task_id"), id);
  EXPECT_EQ(string_attribute(task.task, "error.type"), "http_400");
  EXPECT_EQ(task.task.at("status").at("code").as_int64(), 2) << "a dead letter is an error span";
}

// Issue 48: a gRPC call's spans carry OpenTelemetry's RPC attributes beside the HTTP ones.
TEST(Tracing, AGrpcCallsSpansCarryTheRpcAttributes) {
  GrpcServer server;
  ScriptedUpstream collector;
  collector.on("/v1/traces", respond(200));
  ReboundOptions o;
  o.extra = "service: shop\ntracing:\n  endpoint: http://127.0.0.1:" + std::to_string(collector.port()) +
            "/v1/traces\ndependencies:\n  peer:\n    hosts: [peer.test]\n    origin: http://127.0.0.1:" +
            std::to_string(server.port()) + "\n    context: grpc\n    backoff: {base: 10ms, cap: 50ms}\n";
  ReboundProcess rb(o);
  auto const r = grpc_call(rb.port(), "peer.test", "/test.Peer/Fail",
                           {"--meta", "x-call-id=t1", "--meta", "x-fail-times=1", "--meta", "x-fail-code=14", "--meta",
                            "traceparent=" + caller_traceparent()});
  ASSERT_EQ(r.code, 0) << r.raw;
  auto const spans = wait_for_spans(collector, caller_trace, 3);
  ASSERT_EQ(spans.size(), 3u) << rb.stdout_text();
  for (auto const& s : spans) {
    EXPECT_EQ(string_attribute(s, "rpc.system"), "grpc");
    EXPECT_EQ(string_attribute(s, "rpc.service"), "test.Peer");
    EXPECT_EQ(string_attribute(s, "rpc.method"), "Fail");
    EXPECT_EQ(string_attribute(s, "rebound.dependency"), "peer");
    if (s.at("kind").as_int64() != 3) continue;
    auto const n = int_attribute(s, "attempt");
    EXPECT_EQ(int_attribute(s, "rpc.grpc.status_code"), n == "1" ? "14" : "0");
    EXPECT_EQ(string_attribute(s, "server.address"), "127.0.0.1");
    EXPECT_EQ(int_attribute(s, "server.port"), std::to_string(server.port()));
    EXPECT_EQ(string_attribute(s, "url.full"), "http://127.0.0.1:" + std::to_string(server.port()) + "/test.Peer/Fail")
        << "the origin connected to, as server.address says";
  }
}

// Issue 48: configured as every OpenTelemetry component is, by its variables alone, rebound
// exports over TLS (verified against OTEL_EXPORTER_OTLP_CERTIFICATE) with the headers a hosted
// back end asks for, named and described as OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say.
TEST(Tracing, OpenTelemetrysVariablesReachAnHttpsCollectorWithTheirHeaders) {
  ScriptedUpstream up;
  up.on("/get", respond(200));
  TestPki pki;
  auto const cert = pki.issue("collector", {"127.0.0.1"});
  ScriptedUpstream collector;
  collector.use_tls(cert.cert_file, cert.key_file);
  collector.on("/v1/traces", respond(200));
  ReboundOptions o;
  o.extra = "dependencies:\n  payments:\n    hosts: [\"" + up.authority() + "\"]\n";
  o.env = {"OTEL_EXPORTER_OTLP_ENDPOINT=https://127.0.0.1:" + std::to_string(collector.port()),
           "OTEL_EXPORTER_OTLP_HEADERS=x-api-key=k%3D1,x-team=shop",
           "OTEL_EXPORTER_OTLP_CERTIFICATE=" + pki.ca_file(),
           "OTEL_SERVICE_NAME=checkout",
           "OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test"};
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  ASSERT_EQ(client.get("http://" + up.authority() + "/get", {{"traceparent", caller_traceparent()}}).status, 200u);
  ASSERT_EQ(wait_for_spans(collector, caller_trace, 2).size(), 2u) << rb.stdout_text();
  EXPECT_GE(collector.tls_handshakes(), 1u);
  auto const sent = collector.requests();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent[0].target, "/v1/traces");
  EXPECT_EQ(sent[0].header("x-api-key").value_or(""), "k=1") << "percent-decoded, as the variable's format says";
  EXPECT_EQ(sent[0].header("x-team").value_or(""), "shop");
  boost::system::error_code ec;
  auto const doc = boost::json::parse(sent[0].body, ec);
  ASSERT_FALSE(ec);
  std::map<std::string, std::string> resource;
  for (auto const& a : doc.at("resourceSpans").at(0).at("resource").at("attributes").as_array())
    resource[std::string(a.at("key").as_string())] = std::string(a.at("value").at("stringValue").as_string());
  EXPECT_EQ(resource["service.name"], "checkout");
  EXPECT_EQ(resource["deployment.environment"], "test");
  EXPECT_EQ(rb.stdout_text().find("k=1"), std::string::npos) << "R-9: the key is in no log";
  EXPECT_EQ(HttpClient(rb.admin_port()).get("/config").body.find("k%3D1"), std::string::npos);
}

// The certificate is verified: a collector whose certificate no trusted CA signed gets nothing,
// and the loss is counted.
TEST(Tracing, AnHttpsCollectorWithAnUntrustedCertificateGetsNoSpans) {
  ScriptedUpstream up;
  up.on("/get", respond(200));
  TestPki pki;
  TestPki other;
  auto const cert = pki.issue("collector", {"127.0.0.1"});
  ScriptedUpstream collector;
  collector.use_tls(cert.cert_file, cert.key_file);
  collector.on("/v1/traces", respond(200));
  ReboundOptions o;
  o.extra = "tracing:\n  endpoint: https://127.0.0.1:" + std::to_string(collector.port()) + "/v1/traces\n  ca_file: " +
            other.ca_file() + "\ndependencies:\n  payments:\n    hosts: [\"" + up.authority() + "\"]\n";
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  ASSERT_EQ(client.get("http://" + up.authority() + "/get").status, 200u);
  HttpClient admin(rb.admin_port());
  bool counted = false;
  for (int i = 0; i < 100 && !counted; ++i) {
    counted = admin.get("/metrics").body.find("trace_spans_dropped_total{reason=\"export_failed\"") != std::string::npos;
    if (!counted) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(counted);
  EXPECT_TRUE(collector.requests().empty());
}

// Issue 48: the inbound gate's requests are SERVER spans with their key and what the gate did
// (rebound.idempotency_status); the call to the app is its CLIENT child, whose id the app
// receives. A duplicate answered from the store has no child: it never reached the app.
TEST(Tracing, Seed004_TheInboundGateTracesEachRequestAndItsCallToTheApp) {
  ScriptedUpstream app;
  app.on("/refunds", respond(201));
  ScriptedUpstream collector;
  collector.on("/v1/traces", respond(200));
  store_dir const store;
  ReboundOptions o;
  o.extra = "tracing:\n  endpoint: http://127.0.0.1:" + std::to_string(collector.port()) + "/v1/traces\n" +
            store.yaml() + "inbound:\n  listen: 127.0.0.1:0\n  app: " + app.authority() +
            "\n  routes:\n    - match: {path_prefix: /refunds}\n      idempotency: {require: true}\n";
  ReboundProcess rb(o);
  auto const port = inbound_port(rb);
  std::string const first_trace = "0af7651916cd43dd8448eb211c80319c";
  std::string const second_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  for (auto const& trace : {first_trace, second_trace}) {
    HttpClient c(port);
    auto const r = c.request("POST", "/refunds",
                             {{"Content-Type", "application/json"},
                              {"Idempotency-Key", "refund-1"},
                              {"traceparent", "00-" + trace + "-b7ad6b7169203331-01"}},
                             R"({"amount":1000})");
    ASSERT_EQ(r.status, 201u) << r.body;
  }
  auto const stored = sorted(wait_for_spans(collector, first_trace, 2));
  ASSERT_EQ(stored.attempts.size(), 1u) << rb.stdout_text();
  EXPECT_EQ(string_attribute(stored.task, "rebound.idempotency_status"), "stored");
  EXPECT_EQ(string_attribute(stored.task, "idempotency_key"), "refund-1");
  EXPECT_EQ(int_attribute(stored.task, "http.response.status_code"), "201");
  EXPECT_EQ(stored.task.at("parentSpanId").as_string(), "b7ad6b7169203331");
  auto const& call = stored.attempts[0];
  EXPECT_EQ(call.at("parentSpanId").as_string(), stored.task.at("spanId").as_string());
  EXPECT_EQ(int_attribute(call, "http.response.status_code"), "201");
  EXPECT_EQ(string_attribute(call, "url.full"), "http://" + app.authority() + "/refunds");
  ASSERT_EQ(app.requests().size(), 1u);
  EXPECT_EQ(app.requests()[0].header("traceparent").value_or(""),
            "00-" + first_trace + "-" + std::string(call.at("spanId").as_string()) + "-01")
      << "the app's spans hang under the call that reached it";

  // A child is recorded before its parent and exports keep their order: once the request's
  // span is here, a call to the app would be too.
  auto const all = wait_for_spans(collector, second_trace, 1);
  ASSERT_EQ(all.size(), 1u) << "the duplicate never reached the app: no CLIENT span";
  EXPECT_EQ(all[0].at("kind").as_int64(), 2);
  EXPECT_EQ(string_attribute(all[0], "rebound.idempotency_status"), "replayed");
  EXPECT_EQ(int_attribute(all[0], "http.response.status_code"), "201");
}

TEST(Tracing, AnUnsampledCallersTraceIsForwardedUntouchedAndRecordsNothing) {
  ScriptedUpstream up;
  up.on("/get", respond(200));
  ScriptedUpstream collector;
  collector.on("/v1/traces", respond(200));
  ReboundProcess rb(traced(up, collector.port(), "  sample_ratio: 0\n"));
  HttpClient client(rb.port());
  ASSERT_EQ(client.get("http://" + up.authority() + "/get", {{"traceparent", caller_traceparent(false)}}).status, 200u);
  ASSERT_EQ(client.get("http://" + up.authority() + "/get").status, 200u) << "ratio 0: rebound starts none";
  // A sampled caller is recorded whatever the ratio: once its spans arrived, the others would have.
  std::string const sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  ASSERT_EQ(client.get("http://" + up.authority() + "/get", {{"traceparent", sampled}}).status, 200u);
  EXPECT_EQ(wait_for_spans(collector, "0af7651916cd43dd8448eb211c80319c", 2).size(), 2u);
  EXPECT_EQ(spans_of(collector).size(), 2u) << "only the sampled caller's request and attempt";
  auto const sent = up.requests();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].header("traceparent").value_or(""), caller_traceparent(false));
  EXPECT_FALSE(sent[1].header("traceparent")) << "an unsampled trace rebound started is not announced";
}

// Issue 46, defect 6 (W3C test suite: test_traceparent_duplicated, an all-zero parent id): both
// start a new trace, and the log's correlation id is never the caller's refused trace id.
TEST(Tracing, ADuplicatedOrAllZeroParentTraceparentStartsANewTrace) {
  ScriptedUpstream up;
  up.on("/get", respond(200));
  ScriptedUpstream collector;
  collector.on("/v1/traces", respond(200));
  ReboundProcess rb(traced(up, collector.port(), "  sample_ratio: 1\n"));
  std::string const zero_parent = "00-" + std::string(caller_trace) + "-0000000000000000-01";
  std::string const other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  for (Fields const& fields : {Fields{{"traceparent", caller_traceparent()}, {"traceparent", other}},
                               Fields{{"traceparent", zero_parent}}}) {
    HttpClient client(rb.port());
    ASSERT_EQ(client.get("http://" + up.authority() + "/get", fields).status, 200u);
  }
  auto const sent = up.requests();
  ASSERT_EQ(sent.size(), 2u);
  for (auto const& r : sent) {
    auto const tp = r.header("traceparent").value_or("");
    ASSERT_EQ(tp.size(), 55u) << tp;
    EXPECT_EQ(tp.find(caller_trace), std::string::npos) << "a new trace, not the caller's: " << tp;
    EXPECT_EQ(tp.find("0af7651916cd43dd8448eb211c80319c"), std::string::npos) << "nor the second field's: " << tp;
  }
  rb.signal(SIGTERM);
  ASSERT_TRUE(rb.wait_exit(10s));
  EXPECT_EQ(rb.stdout_text().find(std::string("\"correlation_id\":\"") + std::string(caller_trace)), std::string::npos)
      << rb.stdout_text();
}

TEST(Tracing, ACollectorThatIsDownOrNeverAnswersMakesNoRequestWait) {
  ScriptedUpstream up;
  up.on("/get", respond(200));
  {
    RefusingPort down;
    ReboundProcess rb(traced(up, down.port()));
    HttpClient client(rb.port());
    for (int i = 0; i < 20; ++i) ASSERT_EQ(client.get("http://" + up.authority() + "/get").status, 200u);
    HttpClient admin(rb.admin_port());
    bool counted = false;
    for (int i = 0; i < 100 && !counted; ++i) {
      counted =
          admin.get("/metrics").body.find("trace_spans_dropped_total{reason=\"export_failed\"") != std::string::npos;
      if (!counted) std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(counted) << "spans a collector could not take are counted";
  }
  auto const held = std::make_shared<Gate>();
  ScriptedUpstream slow;
  Script never;
  never.gate = held;
  slow.on("/v1/traces", never);
  {
    ReboundProcess rb(traced(up, slow.port(), "  max_queue: 8\n"));
    HttpClient client(rb.port());
    // The exporter is stuck on its first batch; the queue fills; requests go on regardless.
    for (int i = 0; i < 100; ++i) ASSERT_EQ(client.get("http://" + up.authority() + "/get").status, 200u);
    HttpClient admin(rb.admin_port());
    EXPECT_NE(admin.get("/metrics").body.find("trace_spans_dropped_total{reason=\"queue_full\""), std::string::npos)
        << "a full queue drops and counts";
  }
  held->open();
}

}  // namespace
}  // namespace itest::trace_test
