// HTTP/2 on the proxy port tried as an attacker would (issue 29, defects 2-5): hostile clients
// built on hyper-h2 (integration/h2_attack.py) against the real rebound, with the scripted
// h2 upstream (h2_peer.py) behind it. Each test asserts a bound on what the rebound process
// holds (VmRSS from /proc) or on what the upstream saw, never a timing.
#include "client.hpp"
#include "grpc_peers.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

using namespace itest;
using namespace std::chrono_literals;

namespace h2_adversarial_test {
namespace {

const std::string attack_script = source_path("integration/h2_attack.py");

std::string seen_upstream(std::uint16_t rebound_port, const std::string& path) {
  auto r = grpc_call(rebound_port, "peer.test", "/peer.Svc/Seen", {"--meta", "x-of=" + path});
  return r.code == 0 ? r.trailing["x-seen"] : "(Seen failed: " + r.raw + ")";
}

ReboundOptions in_front_of(H2Peer& peer, const std::string& more = "") {
  ReboundOptions o;
  o.extra = "dependencies:\n  peer:\n    hosts: [peer.test]\n    origin: http://127.0.0.1:" +
            std::to_string(peer.port()) + "\n    context: grpc\n    backoff: {base: 1ms, cap: 2ms}\n" + more;
  return o;
}

ProcessResult attack(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/python3", attack_script};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 60s);
}

/** 20 calls from a client that never opens its window (idle_timeout 1 s), with `routes` added
    to the dependency: every answer's stream must be reset. */
void expect_zero_window_answers_reset(const std::string& routes) {
  H2Peer peer;
  ReboundProcess rb([&] {
    auto o = in_front_of(peer, routes);
    o.idle_timeout = "1s";
    return o;
  }());
  auto const r = attack({"zero-window", std::to_string(rb.port()), "peer.test", "/peer.Svc/Echo", "20", "4"});
  auto const j = parse_json(r.out);
  ASSERT_TRUE(j) << r.out << r.err;
  EXPECT_GE(j->get("resets") ? j->get("resets")->n : 0, 20) << "every answer held for it was reset: " << r.out;
}

bool wait_for_file(const std::string& path, std::chrono::seconds within) {
  auto const end = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < end) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

constexpr unsigned enhance_your_calm = 11;


}  // namespace

// Defect 4 (CVE-2023-44487): requests reset in the same write as they were sent were still
// started on rebound's upstream connection (236,512 upstream streams in 20 s). A stream reset
// before its handler starts is never sent, and a connection that resets most of its streams
// is ended with GOAWAY ENHANCE_YOUR_CALM.
TEST(Http2Adversarial, RapidResetStreamsNeverReachTheUpstreamAndTheConnectionIsEnded) {
  H2Peer peer;
  ReboundProcess rb(in_front_of(peer));
  auto const r = attack({"rapid-reset", std::to_string(rb.port()), "peer.test", "/peer.Svc/Flood", "5000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto const j = parse_json(r.out);
  ASSERT_TRUE(j) << r.out;
  EXPECT_EQ(j->get("goaway") ? j->get("goaway")->n : -1, enhance_your_calm) << r.out;
  // How many streams the attacker got into the socket before the GOAWAY reached it depends on
  // how fast rebound reads (a sanitizer build reads slower): not asserted.
  // A stream whose reset came in a later read than its request may have started (a read
  // can end between the two); one reset in the same read never does.
  auto const seen = seen_upstream(rb.port(), "/peer.Svc/Flood");
  EXPECT_TRUE(seen == "0" || seen == "1" || seen == "2") << "streams started upstream: " << seen;
  EXPECT_TRUE(rb.running());
}

// Defect 5: header blocks of one-byte references to a 4 KB table entry decode to ~4 MB each;
// rebound answered 431 per stream but decoded on, a core per connection. Past four times the
// head limit the connection ends.
TEST(Http2Adversarial, AnHpackBombEndsTheConnection) {
  H2Peer peer;
  ReboundProcess rb(in_front_of(peer));
  auto const r = attack({"hpack-bomb", std::to_string(rb.port()), "peer.test", "200"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto const j = parse_json(r.out);
  ASSERT_TRUE(j) << r.out;
  EXPECT_EQ(j->get("goaway") ? j->get("goaway")->n : -1, enhance_your_calm) << r.out;
  EXPECT_LT(j->get("sent")->n, 200) << "ended before the attacker was done: " << r.out;
  auto ok = grpc_call(rb.port(), "peer.test", "/peer.Svc/Echo", {"--payload", "still-here"});
  EXPECT_EQ(ok.code, 0) << "other connections are served: " << ok.raw;
}

// Defect 2: each stream's body was held whole with its credit returned at once, so a few
// connections with many open streams took gigabytes (20: 2,029 MiB). What one connection holds
// of such bodies is now its receive window (limits.http2_connection_buffer, 8 MiB by
// default): five connections of 100 never-ending bodies hold at most ~40 MiB.
TEST(Http2Adversarial, BodiesThatNeverEndAreBoundedPerConnection) {
  H2Peer peer;
  auto options = in_front_of(peer);
  options.measures_memory = true;
  ReboundProcess rb(options);
  auto const before = rss_kib(rb.pid());
  std::vector<std::unique_ptr<ChildProcess>> attackers;
  std::vector<std::string> done;
  for (int i = 0; i < 5; ++i) {
    auto const dir = make_temp_dir();
    done.push_back(dir + "/done");
    attackers.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        "/usr/bin/python3", attack_script, "hold-bodies", std::to_string(rb.port()), "peer.test", "/peer.Svc/Hold",
        "100", "3", done.back()}));
  }
  std::size_t sent = 0;
  for (auto const& d : done) {
    ASSERT_TRUE(wait_for_file(d, 30s)) << "the attacker never finished";
    auto const j = parse_json(read_file(d));
    if (j && j->get("sent")) sent += static_cast<std::size_t>(j->get("sent")->n);
  }
  auto const during = rss_kib(rb.pid());
  std::cerr << "hold-bodies: " << sent / 1024 << " KiB accepted from 5 connections; RSS " << before << " -> "
            << during << " KiB\n";
  EXPECT_LE(sent, 5u * (8u << 20) + (1u << 20)) << "each connection got at most its buffer's credit";
  EXPECT_LT(during, before + shadow_factor() * 200 * 1024)
      << "bounded by the connection buffers, not by 100 streams x 4 MiB";
  EXPECT_EQ(seen_upstream(rb.port(), "/peer.Svc/Hold"), "0") << "an unfinished body is never sent on";
  attackers.clear();
}

// Defect 2's other half: a body held whole that does not arrive within body_timeout (plus
// min_body_rate) is answered and let go, so a stream open forever no longer holds its bytes
// or keeps the connection from its idle timeout. A gRPC call's answer is DEADLINE_EXCEEDED
// (defect 13: a bare HTTP 408 reads as UNKNOWN to a gRPC client).
TEST(Http2Adversarial, ABodyThatStallsIsAnsweredDeadlineExceeded) {
  H2Peer peer;
  // A high min_body_rate: the few MiB sent earn no extra time.
  ReboundProcess rb(in_front_of(peer, "limits:\n  body_timeout: 1s\n  min_body_rate: 100MiB\n"));
  auto const dir = make_temp_dir();
  auto const r = attack({"hold-bodies", std::to_string(rb.port()), "peer.test", "/peer.Svc/Hold", "3", "0.2",
                         dir + "/done", "4"});
  auto const j = parse_json(r.out);
  ASSERT_TRUE(j) << r.out << r.err;
  auto const* answered = j->get("responses") ? j->get("responses")->get("grpc-4 bad_request") : nullptr;
  EXPECT_EQ(answered ? answered->n : 0, 3) << r.out;
  EXPECT_EQ(seen_upstream(rb.port(), "/peer.Svc/Hold"), "0");
}

// Defect 3: answers to a client that never opens its window were held forever with the
// connection. An answer the client takes nothing of for idle_timeout has its stream reset.
TEST(Http2Adversarial, AnswersToAZeroWindowClientAreLetGo) { expect_zero_window_answers_reset(""); }

// The same for a streaming route, whose answers are relayed as they arrive: an answer the
// client takes nothing of for idle_timeout, while some of it (or its end) waits, is reset.
// (Before, only answers held whole were: a relayed one held its stream and the upstream's.)
TEST(Http2Adversarial, RelayedAnswersToAZeroWindowClientAreLetGo) {
  expect_zero_window_answers_reset(
      "    routes:\n      - match: {path_prefix: /peer.Svc/}\n        grpc_streaming: true\n");
}

// Issue 46, defect 2: three connections that announce a zero window and never open it asked 100
// unary calls each whose answers are 4,000,000 bytes from a fast upstream: rebound held every
// answer until idle_timeout reset its stream, and RSS grew by 535 MiB (nginx grpc_pass: ~12).
// A connection's held answers now have a budget (limits.http2_answer_buffer): past it the
// upstream streams get no more credit and new streams are refused.
TEST(Http2Adversarial, AnswersHeldForZeroWindowClientsAreBoundedPerConnection) {
  H2Peer peer;
  auto options = in_front_of(peer, "    attempt_timeout: 25s\n");
  options.idle_timeout = "3s";
  options.measures_memory = true;
  ReboundProcess rb(options);
  ASSERT_EQ(grpc_call(rb.port(), "peer.test", "/peer.Svc/Echo", {}).code, 0) << "warm: pools, threads";
  auto const before = rss_kib(rb.pid());
  std::vector<std::thread> attackers;
  std::vector<ProcessResult> results(3);
  for (std::size_t i = 0; i < results.size(); ++i)
    attackers.emplace_back([&, i] {
      results[i] = attack({"zero-window", std::to_string(rb.port()), "peer.test", "/peer.Svc/Big", "100", "8"});
    });
  for (auto& t : attackers) t.join();
  auto const peak = rss_kib(rb.pid(), true);
  std::cerr << "zero-window x3, 100 calls of 4 MB answers: RSS " << before << " KiB -> peak " << peak << " KiB\n";
  for (auto const& r : results) {
    auto const j = parse_json(r.out);
    ASSERT_TRUE(j) << r.out << r.err;
  }
  // 47 MiB measured on the plain build, 55 under ASan (its redzones and metadata): bounded per
  // connection, where it grew by 535 MiB.
  EXPECT_LT(peak, before + shadow_factor() * redzone_factor() * 64 * 1024)
      << "bounded per connection, not per stream";
  // The connections ended; a client that reads gets its big answer whole again.
  auto const again = grpc_call(rb.port(), "peer.test", "/peer.Svc/Big", {});
  EXPECT_EQ(again.code, 0) << again.raw;
}

}  // namespace h2_adversarial_test
