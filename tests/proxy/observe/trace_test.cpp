// Traces (observe/trace.hpp): W3C traceparent as a receiver must read it, the OTLP/HTTP JSON
// mapping field by field, and a queue that drops rather than grows.
#include "proxy/observe/trace.hpp"

#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

using namespace rebound::observe;

namespace trace_test {
namespace {

constexpr std::string_view w3c_example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceParent, TheW3CExampleIsReadWithItsSampledFlag) {
  auto p = parse_traceparent(w3c_example);
  ASSERT_TRUE(p);
  EXPECT_EQ(hex(p->trace.data(), p->trace.size()), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(hex(p->parent.data(), p->parent.size()), "00f067aa0ba902b7");
  EXPECT_TRUE(p->sampled);
  EXPECT_EQ(format_traceparent(p->trace, p->parent, true), w3c_example) << "written back as read";
  auto unsampled = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled);
  EXPECT_FALSE(unsampled->sampled);
}

TEST(TraceParent, WhatW3CCallsInvalidStartsANewTrace) {
  for (std::string_view bad : {
           "",
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // all-zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // all-zero parent id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // version 00 is 55 chars
           "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",     // short trace id
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",    // separators
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",    // flags
       })
    EXPECT_FALSE(parse_traceparent(bad)) << bad;
  // A later version is read by its version-00 fields, what follows them ignored.
  auto later = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future");
  ASSERT_TRUE(later);
  EXPECT_TRUE(later->sampled);
}

TEST(Tracer, ACallersTraceIsContinuedAsItsFlagSaysAndANewOneSampledAtTheRatio) {
  trace_settings s;
  s.sample_ratio = 0;
  tracer t(s, "svc", nullptr);
  std::mt19937_64 rng(1);
  auto continued = t.begin(w3c_example, rng);
  EXPECT_TRUE(continued.sampled) << "the caller recorded it: so does rebound, whatever its ratio";
  EXPECT_EQ(hex(continued.trace.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  ASSERT_TRUE(continued.parent);
  EXPECT_EQ(hex(continued.parent->data(), 8), "00f067aa0ba902b7");
  EXPECT_NE(continued.request, span_id{}) << "the request gets a span id of its own";
  EXPECT_FALSE(t.begin("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", rng).sampled);
  EXPECT_FALSE(t.begin("", rng).sampled) << "ratio 0: rebound starts no recorded trace";

  s.sample_ratio = 1;
  tracer all(s, "svc", nullptr);
  auto started = all.begin("", rng);
  EXPECT_TRUE(started.sampled);
  EXPECT_FALSE(started.parent);
  EXPECT_NE(started.trace, trace_id{});
}

// Issue 48: every instance names a task's trace and its own span alike, so its attempts,
// wherever they run, hang under one span; a replay (another window) is a span of its own.
TEST(Tracer, ATasksTraceAndSpanAreNamedByItsIdAndWindowOnEveryInstance) {
  trace_settings s;
  tracer a(s, "svc", nullptr), b(s, "svc", nullptr);
  std::mt19937_64 rng_a(1), rng_b(2);
  auto const one = a.begin_task("", "task-1", 1000, rng_a);
  auto const same = b.begin_task("", "task-1", 1000, rng_b);
  EXPECT_EQ(one.trace, same.trace);
  EXPECT_EQ(one.request, same.request);
  EXPECT_NE(one.request, span_id{});
  EXPECT_FALSE(one.parent) << "without a caller, the task's span is the root";
  auto const replayed = a.begin_task("", "task-1", 2000, rng_a);
  EXPECT_EQ(replayed.trace, one.trace);
  EXPECT_NE(replayed.request, one.request);
  EXPECT_NE(a.begin_task("", "task-2", 1000, rng_a).trace, one.trace);
  auto const called = a.begin_task(w3c_example, "task-1", 1000, rng_a);
  EXPECT_EQ(hex(called.trace.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  ASSERT_TRUE(called.parent);
  EXPECT_EQ(hex(called.parent->data(), 8), "00f067aa0ba902b7") << "under the caller's span";
  EXPECT_EQ(called.request, b.begin_task(w3c_example, "task-1", 1000, rng_b).request);
}

TEST(Otlp, TheJsonEncodingMapsEveryFieldAsOtlpSays) {
  span s;
  s.trace = parse_traceparent(w3c_example)->trace;
  s.id = {1, 2, 3, 4, 5, 6, 7, 8};
  s.parent = span_id{9, 10, 11, 12, 13, 14, 15, 16};
  s.name = "POST payments #2";
  s.k = span::kind::client;
  s.start = std::chrono::system_clock::time_point(std::chrono::nanoseconds(1795755541290123456));
  s.end = s.start + std::chrono::milliseconds(3);
  s.attributes = {
      {"attempt", std::int64_t{2}}, {"idempotency_key", std::string("k-1")}, {"ratio", 0.25}, {"retried", true}};
  s.error = true;
  s.message = "connect refused";
  span root;
  root.trace = s.trace;
  root.id = {9, 10, 11, 12, 13, 14, 15, 16};
  root.k = span::kind::server;
  auto const doc = boost::json::parse(otlp_json({s, root}, "checkout"));
  auto const& rs = doc.at("resourceSpans").at(0);
  auto const& service = rs.at("resource").at("attributes").at(0);
  EXPECT_EQ(service.at("key").as_string(), "service.name");
  EXPECT_EQ(service.at("value").at("stringValue").as_string(), "checkout");
  auto const& scope = rs.at("scopeSpans").at(0);
  EXPECT_EQ(scope.at("scope").at("name").as_string(), "rebound");
  auto const& j = scope.at("spans").at(0);
  EXPECT_EQ(j.at("traceId").as_string(), "4bf92f3577b34da6a3ce929d0e0e4736") << "ids as lower-case hex, not base64";
  EXPECT_EQ(j.at("spanId").as_string(), "0102030405060708");
  EXPECT_EQ(j.at("parentSpanId").as_string(), "090a0b0c0d0e0f10");
  EXPECT_EQ(j.at("name").as_string(), "POST payments #2");
  EXPECT_EQ(j.at("kind").as_int64(), 3) << "SPAN_KIND_CLIENT, as a number";
  EXPECT_EQ(j.at("startTimeUnixNano").as_string(), "1795755541290123456") << "fixed64 as a decimal string";
  EXPECT_EQ(j.at("endTimeUnixNano").as_string(), "1795755541293123456");
  auto const& a = j.at("attributes");
  EXPECT_EQ(a.at(0).at("key").as_string(), "attempt");
  EXPECT_EQ(a.at(0).at("value").at("intValue").as_string(), "2") << "int64 as a decimal string";
  EXPECT_EQ(a.at(1).at("value").at("stringValue").as_string(), "k-1");
  EXPECT_EQ(a.at(2).at("value").at("doubleValue").as_double(), 0.25);
  EXPECT_EQ(a.at(3).at("value").at("boolValue").as_bool(), true);
  EXPECT_EQ(j.at("status").at("code").as_int64(), 2) << "STATUS_CODE_ERROR";
  EXPECT_EQ(j.at("status").at("message").as_string(), "connect refused");
  auto const& r = scope.at("spans").at(1);
  EXPECT_FALSE(r.as_object().contains("parentSpanId")) << "a root span has no parent field";
  EXPECT_EQ(r.at("kind").as_int64(), 2) << "SPAN_KIND_SERVER";
  EXPECT_TRUE(r.at("status").as_object().empty()) << "STATUS_CODE_UNSET";
}

TEST(Tracer, AFullQueueDropsAndCountsInsteadOfWaiting) {
  rebound::observe::metrics m("svc");
  trace_settings s;
  s.max_queue = 4;
  s.batch = 4;
  s.flush_every = std::chrono::hours(1);  // nothing leaves the queue on its own
  s.timeout = std::chrono::milliseconds(200);
  {
    tracer t(s, "svc", &m);
    // The first four fill the queue (and wake the exporter); what comes before it took them is dropped.
    for (int i = 0; i < 1000; ++i) t.record(span{});
  }  // the destructor exports what is left, and fails
  auto const text = m.scrape();
  auto value = [&](std::string const& series) {
    auto at = text.find(series);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 1));
  };
  double const full = value("trace_spans_dropped_total{reason=\"queue_full\",service=\"svc\"}");
  double const failed = value("trace_spans_dropped_total{reason=\"export_failed\",service=\"svc\"}");
  EXPECT_GT(full, 0) << text;
  EXPECT_GT(failed, 0) << text;
  EXPECT_EQ(full + failed, 1000) << "every span is exported or counted: " << text;
}

}  // namespace
}  // namespace trace_test
