// SIGHUP reload (SPEC 1) through the real binary: a valid file takes over for new requests
// while budgets and breakers of dependencies that still exist keep their state; an
// invalid file changes nothing; a request in flight finishes on the config it started with.
#include "helpers.hpp"

#include <csignal>

namespace itest::reload_test {
namespace {

/// The running file with its trailing `extra` replaced.
void rewrite(const ReboundProcess& rb, const std::string& old_extra, const std::string& new_extra) {
  auto const& text = rb.config_text();
  write_file(rb.config_path(), text.substr(0, text.size() - old_extra.size()) + new_extra);
}

std::string admin_body(const ReboundProcess& rb, const std::string& path) {
  HttpClient admin(rb.admin_port());
  return admin.get(path).body;
}

TEST(Reload, ValidFileTakesOverAndTheOpenBreakerSurvives) {
  ScriptedUpstream down;
  down.on("/x", respond(503));
  ScriptedUpstream other;
  other.on("/y", respond(200));
  std::string const deps = "dependencies:\n  pay:\n    hosts: [\"" + down.authority() +
                           "\"]\n"
                           "    max_retries: 1\n    backoff: {base: 1ms, cap: 2ms}\n"
                           "    circuit_breaker: {min_requests: 4, open_for: 1h}\n";
  ReboundOptions o;
  o.extra = deps;
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  for (int i = 0; i < 3; ++i) client.get("http://" + down.authority() + "/x");
  auto const refused = raw_exchange(rb.port(), absolute_request("GET", down.authority(), "/x"));
  ASSERT_TRUE(IsReboundError(refused, 503, {"circuit_open"}));
  auto const seen = down.request_count();

  // Same settings for `pay`, a new dependency, and unknown hosts now refused.
  std::string const next = "unknown_hosts: deny\n" + deps + "  other:\n    hosts: [\"" + other.authority() + "\"]\n";
  rewrite(rb, o.extra, next);
  rb.signal(SIGHUP);
  ASSERT_TRUE(rb.wait_for_log("\"config_reloaded\""));
  auto const out = rb.stdout_text();
  EXPECT_NE(out.find("\"kept\":\"pay\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"added\":\"other\""), std::string::npos) << out;

  EXPECT_TRUE(
      IsReboundError(raw_exchange(rb.port(), absolute_request("GET", down.authority(), "/x")), 503, {"circuit_open"}))
      << "the breaker's state survived the reload";
  EXPECT_EQ(down.request_count(), seen) << "an open breaker touches no upstream";
  auto const ok = raw_exchange(rb.port(), absolute_request("GET", other.authority(), "/y"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200u) << "the new dependency is served";
  ScriptedUpstream stranger;
  EXPECT_TRUE(IsReboundError(raw_exchange(rb.port(), absolute_request("GET", stranger.authority(), "/")), 403,
                             {"unknown_host"}))
      << "the new unknown_hosts applies";
  EXPECT_EQ(stranger.request_count(), 0u);
  auto const config = admin_body(rb, "/config");
  EXPECT_NE(config.find("\"unknown_hosts\":\"deny\""), std::string::npos) << config;
  EXPECT_NE(admin_body(rb, "/dependencies").find("\"name\":\"other\""), std::string::npos);
  EXPECT_EQ(rb.terminate(), 0);
}

TEST(Reload, InvalidFileIsRefusedAndTheOldConfigServesOn) {
  ScriptedUpstream up;
  up.on("/a", respond(200));
  ReboundOptions o;
  o.extra = "service: before\n";
  ReboundProcess rb(o);
  rewrite(rb, o.extra, "defaults:\n  max_retrys: 3\n  backoff: {jitter: none}\n");
  rb.signal(SIGHUP);
  ASSERT_TRUE(rb.wait_for_log("\"config_reload_failed\""));
  auto const out = rb.stdout_text();
  EXPECT_NE(out.find("did you mean"), std::string::npos) << out;
  EXPECT_NE(out.find("(R-1)"), std::string::npos) << "every finding is reported: " << out;
  EXPECT_EQ(out.find("\"config_reloaded\""), std::string::npos);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/a"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_NE(admin_body(rb, "/config").find("\"service\":\"before\""), std::string::npos);
  EXPECT_TRUE(rb.running());
  EXPECT_EQ(rb.terminate(), 0);
}

TEST(Reload, RequestInFlightFinishesOnTheConfigItStartedWith) {
  ScriptedUpstream up;
  auto gate = std::make_shared<Gate>();
  Script held = respond(200);
  held.gate = gate;
  up.on("/held", held);
  ReboundOptions o;
  o.attempt_timeout = "10s";
  ReboundProcess rb(o);
  std::optional<Response> first;
  std::thread in_flight(
      [&] { first = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/held"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(1));

  // The new file gives attempts 200 ms: the held request would time out under it.
  write_file(rb.config_path(), "listen: 127.0.0.1:" + std::to_string(rb.port()) +
                                   "\nadmin: 127.0.0.1:" + std::to_string(rb.admin_port()) +
                                   "\nworkers: 2\ndrain_timeout: 2s\n"
                                   "defaults:\n  attempt_timeout: 200ms\n  max_retries: 1\n");
  rb.signal(SIGHUP);
  ASSERT_TRUE(rb.wait_for_log("\"config_reloaded\""));

  // A new request runs on the new file and times out; only then is the first one let go,
  // so it has outlived the new attempt_timeout for certain.
  auto gate2 = std::make_shared<Gate>();
  held.gate = gate2;
  up.on("/held2", held);
  auto second = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/held2"), 20s);
  gate2->open();
  EXPECT_TRUE(IsReboundError(second, 504, {"attempt_timeout"})) << "a new request runs on the new file";

  gate->open();
  in_flight.join();
  ASSERT_TRUE(first) << last_exchange_error();
  EXPECT_EQ(first->status, 200u) << "finished on the 10 s attempt_timeout it started with";
}

TEST(Reload, ChangedListenAddressNeedsARestartAndSaysSo) {
  ScriptedUpstream up;
  up.on("/a", respond(200));
  ReboundProcess rb;
  auto const moved = free_port();
  auto text = rb.config_text();
  auto const at = text.find("listen: 127.0.0.1:" + std::to_string(rb.port()));
  ASSERT_NE(at, std::string::npos);
  text.replace(at, text.find('\n', at) - at, "listen: 127.0.0.1:" + std::to_string(moved));
  write_file(rb.config_path(), text + "service: renamed\n");
  rb.signal(SIGHUP);
  ASSERT_TRUE(rb.wait_for_log("\"config_restart_needed\""));
  auto const out = rb.stdout_text();
  EXPECT_NE(out.find("\"keys\":\"listen,service\""), std::string::npos) << out;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/a"));
  ASSERT_TRUE(r) << "still on the old address";
  EXPECT_EQ(r->status, 200u);
  auto const config = admin_body(rb, "/config");
  EXPECT_NE(config.find("\"listen\":\"127.0.0.1:" + std::to_string(rb.port()) + "\""), std::string::npos)
      << "/config shows what runs: " << config;
  EXPECT_NE(config.find("\"service\":\"unknown_service\""), std::string::npos) << config;
}

}  // namespace
}  // namespace itest::reload_test

namespace itest::reload_test {
namespace {

TEST(Reload, WatchedFileIsReloadedWhenItChanges) {
  ScriptedUpstream up;
  up.on("/a", respond(200));
  ReboundOptions o;
  o.extra = "watch_config: true\n";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/a"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  // Written as a new file renamed over the old one, as a ConfigMap update or an editor does.
  write_file(rb.config_path() + ".new", rb.config_text() + "unknown_hosts: deny\n");
  ASSERT_EQ(std::rename((rb.config_path() + ".new").c_str(), rb.config_path().c_str()), 0);
  ASSERT_TRUE(rb.wait_for_log("\"config_reloaded\"", std::chrono::seconds(15)));
  EXPECT_NE(rb.stdout_text().find("\"config_changed\""), std::string::npos);
  EXPECT_TRUE(
      IsReboundError(raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/a")), 403, {"unknown_host"}));
}

}  // namespace
}  // namespace itest::reload_test

namespace itest::reload_test {
namespace {

TEST(Reload, R6_AnInboundListenerOrKeyStoreAddedByAReloadNeedsARestartAndSaysSo) {
  ScriptedUpstream app;
  ReboundProcess rb;
  write_file(rb.config_path(), rb.config_text() + "inbound:\n  listen: 127.0.0.1:0\n  app: " + app.authority() +
                                   "\n  routes:\n    - idempotency: {require: true}\n");
  rb.signal(SIGHUP);
  // Not a silent plain proxy: keys cannot be kept without the store opened at start-up.
  ASSERT_TRUE(rb.wait_for_log("\"config_restart_needed\""));
  auto const out = rb.stdout_text();
  EXPECT_NE(out.find("\"keys\":\"inbound.listen,store (opened at start-up only)\""), std::string::npos) << out;
}

}  // namespace
}  // namespace itest::reload_test
