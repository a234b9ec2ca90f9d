#include "proxy/observe/json.hpp"

#include <gtest/gtest.h>

using rebound::observe::append_json_string;

TEST(Json, EscapesQuotesBackslashesAndControlCharacters) {
  std::string out;
  append_json_string(out, std::string_view("a\"b\\c\nd\x01\x7f", 9));
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\nd\\u0001\\u007f\"");
}

namespace json_test {

using rebound::observe::json_writer;

TEST(JsonWriter, PutsCommasBetweenFieldsAndElementsAtEveryDepth) {
  std::string out;
  json_writer w(out);
  w.open_object().field("a", 1).key("list").open_array();
  w.value("x").open_object().field("b", true).close_object().null().close_array();
  w.key("empty").open_object().close_object().field("c", -2).close_object();
  EXPECT_EQ(out, R"({"a":1,"list":["x",{"b":true},null],"empty":{},"c":-2})");
}

TEST(JsonWriter, QuotesWhatItIsGivenSoAnIdCannotBreakTheDocument) {
  std::string out;
  // An id from a request path once went into an admin answer unquoted.
  json_writer(out).open_object().field("id", "a\",\"deleted\":false,\"x\":\"").close_object();
  EXPECT_EQ(out, R"({"id":"a\",\"deleted\":false,\"x\":\""})");
}

TEST(JsonWriter, WritesNumbersTimesAndRawDocumentsAsGiven) {
  std::string out;
  json_writer w(out);
  w.open_object().key("ratio").number(0.25, "%.4f").key("p").number(0.1);
  w.field("at", std::chrono::system_clock::time_point(std::chrono::milliseconds(1'800'000'000'123)));
  w.key("spec").raw(R"({"max_retries":2})").close_object();
  EXPECT_EQ(out, R"({"ratio":0.2500,"p":0.1,"at":"2027-01-15T08:00:00.123Z","spec":{"max_retries":2}})");
}

}  // namespace json_test
