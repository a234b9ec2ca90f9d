#include "proxy/observe/json.hpp"

#include <gtest/gtest.h>

using rebound::observe::append_json_string;

TEST(Json, EscapesQuotesBackslashesAndControlCharacters) {
  std::string out;
  append_json_string(out, std::string_view("a\"b\\c\nd\x01\x7f", 9));
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\nd\\u0001\\u007f\"");
}

// Issue 46, defect 5: an upstream's `Upgrade: h\xff\xfe"c` (obs-text is legal in a field value)
// reached a 502 body, a log line and an OTLP batch as bytes no JSON reader accepts.
TEST(Json, BytesThatAreNotUtf8BecomeTheReplacementCharacter) {
  std::string out;
  append_json_string(out, "h\xff\xfe\"c");
  EXPECT_EQ(out, "\"h\xef\xbf\xbd\xef\xbf\xbd\\\"c\"");
  // Overlong, a surrogate, past U+10FFFF, cut short, a lone continuation, never a lead byte:
  // each byte is one replacement.
  for (std::string_view bad :
       {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80", "\xf8"}) {
    out.clear();
    append_json_string(out, bad);
    std::string expected = "\"";
    for (std::size_t i = 0; i < bad.size(); ++i) expected += "\xef\xbf\xbd";
    EXPECT_EQ(out, expected + "\"");
  }
}

TEST(Json, WellFormedUtf8IsKeptAsItIs) {
  std::string out;
  append_json_string(out, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbd");
  EXPECT_EQ(out, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbd\"");
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
