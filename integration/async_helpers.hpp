#pragma once
// What the async delivery tests share: a store file of their own, a webhook dependency on a
// scripted upstream, and the admin API's view of a task.
#include "helpers.hpp"

#include <algorithm>
#include <initializer_list>
#include <thread>

namespace itest {

/// A store file in a directory of the test's own, removed with it.
struct store_dir {
  std::string dir = make_temp_dir();
  ~store_dir() { remove_tree(dir); }
  std::string yaml() const { return "store: {path: " + dir + "/rebound.db}\n"; }
};

inline ReboundOptions hooks_to(const ScriptedUpstream& up, const store_dir& store, const std::string& more = {}) {
  ReboundOptions o;
  o.extra = store.yaml() + "dependencies:\n  hooks:\n    hosts: [\"" + up.authority() +
            "\"]\n    context: webhook\n    backoff: {base: 10ms, cap: 50ms}\n" + more;
  return o;
}

inline std::string post(const std::string& authority, const std::string& path, const std::string& body,
                        const std::string& extra_headers = {}) {
  return absolute_request("POST", authority, path, "Content-Type: application/json\r\n" + extra_headers, body);
}

/// The first line of /metrics' `text` of the series `name` whose labels hold every one of
/// `labels` (each `key="value"`); empty when there is none.
inline std::string series_line(const std::string& text, const std::string& name,
                               std::initializer_list<std::string> labels) {
  for (auto at = text.find("\n" + name + "{"); at != std::string::npos; at = text.find("\n" + name + "{", at + 1)) {
    auto const line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    auto const has = [&](const std::string& l) { return line.find(l) != std::string::npos; };
    if (std::all_of(labels.begin(), labels.end(), has)) return line;
  }
  return {};
}

/// The task id of a 202 answer, checked against its Location; empty when it is not one.
inline std::string accepted_task(const std::optional<Response>& r, const ReboundProcess& rb) {
  if (!r || r->status != 202) return {};
  auto const body = parse_json(r->body);
  if (!body || !body->get("task_id")) return {};
  auto const id = body->get("task_id")->s;
  EXPECT_EQ(r->header("Location").value_or(""),
            "http://127.0.0.1:" + std::to_string(rb.admin_port()) + "/retry-tasks/" + id);
  EXPECT_EQ(r->header("Preference-Applied").value_or(""), "respond-async");
  return id;
}

/// GET /retry-tasks/{id} until its status is `want` (10 s at most); the last answer.
inline std::optional<Json> task_until(const ReboundProcess& rb, const std::string& id, const std::string& want) {
  std::optional<Json> last;
  for (int i = 0; i < 200; ++i) {
    HttpClient admin(rb.admin_port());
    last = parse_json(admin.get("/retry-tasks/" + id).body);
    if (last && last->get("status") && last->get("status")->s == want) return last;
    std::this_thread::sleep_for(50ms);
  }
  return last;
}

inline std::string status_of(const std::optional<Json>& j) {
  return j && j->get("status") ? j->get("status")->s : std::string("<no answer>");
}

}  // namespace itest
