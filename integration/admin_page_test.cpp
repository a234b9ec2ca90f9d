// Issue 34, part 4: the admin page on the admin port, in a real browser (Debian's chromium,
// headless, driven by python3-selenium through chromium-driver; integration/admin_page.py),
// and what the admin listener promises around it: its own files only, and no write from a page
// of another origin.
#include "async_helpers.hpp"

namespace itest::admin_page_test {
namespace {

constexpr auto token = "page-admin-token";

ReboundOptions with_token(const ScriptedUpstream& up, const store_dir& store) {
  write_file(store.dir + "/admin-token", std::string(token) + "\n");
  auto o = hooks_to(up, store, "    concurrency: {mode: fixed, limit: 8}\n");  // shown on the page
  o.admin_token_file = store.dir + "/admin-token";
  return o;
}

TEST(AdminPage, R8_AnOperatorReplaysADeadLetterFromTheBrowser) {
  ScriptedUpstream up;
  up.on("/hook/1", respond(400));
  up.on("/hook/2", respond(400));
  store_dir store;
  ReboundProcess rb(with_token(up, store));
  auto const replayed = accepted_task(raw_exchange(rb.port(), post(up.authority(), "/hook/1", "{}")), rb);
  auto const refused = accepted_task(raw_exchange(rb.port(), post(up.authority(), "/hook/2", "{}")), rb);
  ASSERT_FALSE(replayed.empty());
  ASSERT_FALSE(refused.empty());
  ASSERT_EQ(status_of(task_until(rb, replayed, "DEAD_LETTERED")), "DEAD_LETTERED");
  ASSERT_EQ(status_of(task_until(rb, refused, "DEAD_LETTERED")), "DEAD_LETTERED");
  up.on("/hook/1", respond(200));  // the cause fixed: the replay can be delivered

  auto const r = run_process({"/usr/bin/python3", source_path("integration/admin_page.py"), "--url",
                              "http://127.0.0.1:" + std::to_string(rb.admin_port()) + "/ui", "--token", token,
                              "--replay", replayed, "--refused", refused, "--dependency", "hooks"},
                             {}, 120s);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(status_of(task_until(rb, replayed, "SUCCEEDED")), "SUCCEEDED") << "the replay was delivered";
  EXPECT_EQ(status_of(task_until(rb, refused, "DEAD_LETTERED")), "DEAD_LETTERED") << "a wrong token replays nothing";
  EXPECT_EQ(up.request_count("/hook/2"), 1u);
}

TEST(AdminPage, ThePageIsServedWithItsOwnFilesOnly) {
  ScriptedUpstream up;
  store_dir store;
  ReboundProcess rb(with_token(up, store));
  HttpClient admin(rb.admin_port());
  auto const root = admin.get("/");
  EXPECT_EQ(root.status, 302u);
  EXPECT_EQ(root.header("Location").value_or(""), "/ui");
  auto const page = admin.get("/ui");
  ASSERT_EQ(page.status, 200u);
  EXPECT_EQ(page.header("Content-Type").value_or(""), "text/html; charset=utf-8");
  auto const csp = page.header("Content-Security-Policy").value_or("");
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
  EXPECT_NE(page.body.find("data-store=\"yes\""), std::string::npos) << "the page knows there is a store";
  EXPECT_EQ(page.body.find("http://"), std::string::npos) << "no asset from elsewhere";
  EXPECT_EQ(page.body.find("https://"), std::string::npos) << "no asset from elsewhere";
  for (auto const* asset : {"/ui/app.js", "/ui/app.css"}) {
    auto const a = admin.get(asset);
    EXPECT_EQ(a.status, 200u) << asset;
    EXPECT_EQ(a.header("X-Content-Type-Options").value_or(""), "nosniff") << asset;
    EXPECT_FALSE(a.body.empty()) << asset;
  }
  EXPECT_EQ(admin.get("/ui/other.js").status, 404u);
  EXPECT_EQ(admin.get("/ui/app.js").body.find("localStorage"), std::string::npos) << "the token is never saved";
}

TEST(AdminPage, WithoutAStoreThePageSaysSoInsteadOfAskingForDeadLetters) {
  ReboundProcess rb;
  HttpClient admin(rb.admin_port());
  auto const page = admin.get("/ui");
  ASSERT_EQ(page.status, 200u);
  EXPECT_NE(page.body.find("data-store=\"no\""), std::string::npos);
}

TEST(AdminPage, AWriteFromAPageOfAnotherOriginIsRefusedTokenOrNot) {
  ScriptedUpstream up;
  up.on("/hook", respond(400));
  store_dir store;
  ReboundProcess rb(with_token(up, store));
  auto const id = accepted_task(raw_exchange(rb.port(), post(up.authority(), "/hook", "{}")), rb);
  ASSERT_EQ(status_of(task_until(rb, id, "DEAD_LETTERED")), "DEAD_LETTERED");
  HttpClient admin(rb.admin_port());
  auto const self = "http://127.0.0.1:" + std::to_string(rb.admin_port());
  std::string const bearer = std::string("Bearer ") + token;
  auto const foreign = admin.request("POST", "/dlq/" + id + "/replay",
                                     {{"Origin", "http://evil.example"},
                                      {"Authorization", bearer},
                                      {"Host", "127.0.0.1:" + std::to_string(rb.admin_port())}});
  EXPECT_EQ(foreign.status, 403u) << foreign.body;
  EXPECT_EQ(status_of(task_until(rb, id, "DEAD_LETTERED")), "DEAD_LETTERED");
  auto const own = admin.request(
      "POST", "/dlq/" + id + "/replay",
      {{"Origin", self}, {"Authorization", bearer}, {"Host", "127.0.0.1:" + std::to_string(rb.admin_port())}});
  EXPECT_EQ(own.status, 202u) << "the admin page's own origin may write: " << own.body;
  EXPECT_EQ(admin.get("/dlq/" + id).status, 405u) << "reads are not asked where they come from";
}

// Issue 46, defect 1: a page of http://evil.example:PORT whose name was rebound to 127.0.0.1
// sends its own Host and Origin, which agree with each other. It used to get 201 for a task that
// rebound then delivered with the dependency's bearer_file token.
TEST(AdminPage, ADnsRebindingPageCanNeitherReadNorSubmitACall) {
  ScriptedUpstream up;
  up.on("/charge", respond(200));
  store_dir store;
  write_file(store.dir + "/dependency-token", "dependency-secret\n");
  auto o = hooks_to(up, store, "    auth: {type: bearer_file, path: " + store.dir + "/dependency-token}\n");
  o.admin_allowed_hosts = "rebound.test";
  ReboundProcess rb(o);
  auto const port = std::to_string(rb.admin_port());
  std::string const evil = "evil.example:" + port;
  std::string const task = "{\"target\":\"http://" + up.authority() + "/charge\",\"body\":\"{}\"}";
  // A fresh connection each: a refused write ends its connection (its body is still on the wire).
  auto const ask = [&](const std::string& method, const std::string& path, const Fields& fields,
                       const std::string& body = {}) {
    HttpClient admin(rb.admin_port());
    return admin.request(method, path, fields, body);
  };
  auto const submit = ask(
      "POST", "/retry-tasks", {{"Host", evil}, {"Origin", "http://" + evil}, {"Content-Type", "text/plain"}}, task);
  EXPECT_EQ(submit.status, 403u) << submit.body;
  EXPECT_NE(submit.body.find("\"forbidden\""), std::string::npos) << submit.body;
  for (auto const* path : {"/config", "/dlq", "/metrics", "/ui"})
    EXPECT_EQ(ask("GET", path, {{"Host", evil}}).status, 403u) << path << ": reads are refused too";
  EXPECT_EQ(ask("GET", "/config", {{"Host", "localhost:" + port}}).status, 200u);
  EXPECT_EQ(ask("GET", "/config", {{"Host", "rebound.test:" + port}}).status, 200u) << "admin.allowed_hosts";
  EXPECT_EQ(ask("GET", "/healthz", {{"Host", "10.1.2.3:" + port}}).status, 200u) << "a kubelet probe by pod IP";
  // A page of another local origin gets nothing written either, though its Host is loopback.
  auto const local = ask("POST", "/retry-tasks",
                                   {{"Host", "127.0.0.1:" + port}, {"Origin", "http://127.0.0.1:8000"},
                                    {"Content-Type", "text/plain"}},
                                   task);
  EXPECT_EQ(local.status, 403u) << local.body;
  // The operator's own tools (no Origin) still submit.
  auto const own = ask("POST", "/retry-tasks", {{"Content-Type", "application/json"}}, task);
  EXPECT_EQ(own.status, 201u) << own.body;
  ASSERT_TRUE(rb.wait_for_log("\"task_delivered\""));
  EXPECT_EQ(up.request_count("/charge"), 1u) << "only the operator's task was delivered";
}

}  // namespace
}  // namespace itest::admin_page_test
