#include "proxy/wire/field_list.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bhttp = boost::beast::http;
using rebound::http::field_list;

namespace field_list_test {
namespace {

std::vector<std::string> lines(const field_list& f) {
  std::vector<std::string> out;
  for (auto const& h : f) out.push_back(std::string(h.name_string()) + ": " + std::string(h.value()));
  return out;
}

}  // namespace

TEST(FieldList, KeepsFieldsInTheirOrderAndSpellingRepeatsIncluded) {
  field_list f;
  f.insert(bhttp::field::content_type, "Content-type", "text/plain");
  f.insert(bhttp::field::unknown, "X-Trace", "a");
  f.insert(bhttp::field::unknown, "x-trace", "b");
  EXPECT_EQ(lines(f), (std::vector<std::string>{"Content-type: text/plain", "X-Trace: a", "x-trace: b"}));
  EXPECT_EQ(f[bhttp::field::content_type], "text/plain");
  EXPECT_EQ(f.find("X-TRACE")->value(), "a");  // names compare without case, as RFC 9110 5.1 says
  EXPECT_EQ(f.find("X-Missing"), f.end());
  EXPECT_EQ(f.find(bhttp::field::retry_after), f.end());
}

TEST(FieldList, SetReplacesEveryFieldOfTheNameAndMovesItToTheEnd) {
  field_list f;
  f.insert(bhttp::field::via, "1.0 a");
  f.insert(bhttp::field::server, "nginx");
  f.insert(bhttp::field::via, "1.1 b");
  f.set(bhttp::field::via, "1.0 a, 1.1 b, 1.1 rebound");
  EXPECT_EQ(lines(f), (std::vector<std::string>{"Server: nginx", "Via: 1.0 a, 1.1 b, 1.1 rebound"}));
  EXPECT_EQ(f.count(bhttp::field::via), 1u);
  f.insert(bhttp::field::unknown, "rebound-attempts", "1");
  f.set("Rebound-Attempts", "2");
  EXPECT_EQ(lines(f).back(), "Rebound-Attempts: 2");
  EXPECT_EQ(lines(f).size(), 3u);
}

TEST(FieldList, AValueTakenFromTheListItselfSurvivesTheListGrowing) {
  field_list f;
  f.insert(bhttp::field::unknown, "X-Long", std::string(40, 'v'));
  for (int i = 0; i < 50; ++i) f.insert(bhttp::field::unknown, "X-Copy", f.find("X-Long")->value());
  f.set("X-Long", f.find("X-Long")->value());  // replaced by its own value
  for (auto const& h : f) EXPECT_EQ(h.value(), std::string(40, 'v')) << h.name_string();
}

TEST(FieldList, ErasingWhileWalkingSkipsNothingAndClearKeepsNothing) {
  field_list f;
  for (auto name : {"A", "B", "C", "D"}) f.insert(bhttp::field::unknown, name, "1");
  for (auto it = f.begin(); it != f.end();) it = it->name_string() == "B" || it->name_string() == "C" ? f.erase(it) : std::next(it);
  EXPECT_EQ(lines(f), (std::vector<std::string>{"A: 1", "D: 1"}));
  f.insert(bhttp::field::connection, "close");
  EXPECT_EQ(f.erase(bhttp::field::connection), 1u);
  EXPECT_EQ(f.erase(bhttp::field::connection), 0u);
  f.clear();
  EXPECT_EQ(f.begin(), f.end());
}

}  // namespace field_list_test
