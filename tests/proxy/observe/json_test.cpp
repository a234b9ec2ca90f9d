#include "proxy/observe/json.hpp"

#include <gtest/gtest.h>

using rebound::observe::append_json_string;

TEST(Json, EscapesQuotesBackslashesAndControlCharacters) {
  std::string out;
  append_json_string(out, std::string_view("a\"b\\c\nd\x01\x7f", 9));
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\nd\\u0001\\u007f\"");
}
