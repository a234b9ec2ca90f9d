#include "proxy/auth/bearer_file.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace rebound::auth;
using namespace std::chrono_literals;

namespace bearer_file_test {
namespace {

struct token_file {
  std::string path;
  token_file() {
    char tmpl[] = "/tmp/rebound-bearer-XXXXXX";
    ::close(mkstemp(tmpl));
    path = tmpl;
  }
  void write(const std::string& s) const {
    auto const next = path + ".next";
    std::ofstream(next) << s;
    std::rename(next.c_str(), path.c_str());
  }
  ~token_file() { std::remove(path.c_str()); }
};

std::string jwt_with_exp(long long exp) {
  auto const claims = base64_encode(R"({"exp":)" + std::to_string(exp) + "}");
  std::string url;
  for (char c : claims)
    if (c != '=') url.push_back(c == '+' ? '-' : c == '/' ? '_' : c);
  return "eyJhbGciOiJub25lIn0." + url + ".sig";
}

TEST(BearerFile, ReadsTheTokenAndFollowsChanges) {
  token_file f;
  f.write("  abc\n");
  bearer_file source(f.path);
  auto const now = wall_clock::now();
  EXPECT_EQ(source.current(now).authorization.value_or(""), "Bearer abc");
  f.write("def\n");
  EXPECT_EQ(source.current(now).authorization.value_or(""), "Bearer def");
}

TEST(BearerFile, R9_AnExpiredJwtIsNotSent) {
  token_file f;
  f.write(jwt_with_exp(1000));
  bearer_file source(f.path);
  auto const at = wall_clock::time_point(std::chrono::seconds(999));
  EXPECT_TRUE(source.current(at).authorization);
  auto const later = source.current(wall_clock::time_point(std::chrono::seconds(1000)));
  EXPECT_FALSE(later.authorization);
  EXPECT_NE(later.error.find("expired"), std::string::npos);
}

TEST(BearerFile, EmptyMissingOrMultiLineFilesGiveAReason) {
  token_file f;
  f.write("\n");
  bearer_file empty(f.path);
  EXPECT_NE(empty.current(wall_clock::now()).error.find("empty"), std::string::npos);
  f.write("a\nb\n");
  EXPECT_NE(empty.current(wall_clock::now()).error.find("more than one line"), std::string::npos);
  bearer_file missing("/nonexistent/token");
  auto const c = missing.current(wall_clock::now());
  EXPECT_FALSE(c.authorization);
  EXPECT_NE(c.error.find("/nonexistent/token"), std::string::npos);
}

}  // namespace

}  // namespace bearer_file_test
