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
  auto o = hooks_to(up, store);
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

}  // namespace
}  // namespace itest::admin_page_test
