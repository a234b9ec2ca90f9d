// The one reading rule for secrets kept in files (bearer tokens, client secrets, the admin
// token): trimmed content, and errors as values for what is not a readable regular file.
#include "proxy/auth/secret_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using rebound::auth::read_secret_file;

namespace secret_file_test {
namespace {

struct temp_dir {
  std::filesystem::path dir;
  temp_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rebound-secret-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  }
};

}  // namespace

TEST(SecretFile, IsReadWithoutTheWhitespaceAroundIt) {
  temp_dir d;
  auto const r = read_secret_file(d.write("token", "  s3cret value\r\n\n"));
  ASSERT_TRUE(r.value) << r.error;
  EXPECT_EQ(*r.value, "s3cret value");
  auto const empty = read_secret_file(d.write("empty", "\n"));
  ASSERT_TRUE(empty.value);
  EXPECT_TRUE(empty.value->empty()) << "an empty secret is the caller's to refuse";
}

// Issue 29, defect 16: reading a directory made libstdc++'s filebuf throw mid-read, which
// dropped admin connections without an answer.
TEST(SecretFile, ADirectoryAMissingFileOrAHugeOneIsAnErrorNotAThrow) {
  temp_dir d;
  std::filesystem::create_directory(d.dir / "a-dir");
  auto const dir = read_secret_file((d.dir / "a-dir").string());
  EXPECT_FALSE(dir.value);
  EXPECT_NE(dir.error.find("not a regular file"), std::string::npos) << dir.error;
  auto const missing = read_secret_file((d.dir / "missing").string());
  EXPECT_FALSE(missing.value);
  EXPECT_NE(missing.error.find("missing"), std::string::npos) << "names the file: " << missing.error;
  auto const huge = read_secret_file(d.write("huge", std::string(100 * 1024, 'x')));
  EXPECT_FALSE(huge.value);
  EXPECT_EQ(huge.error.find("xxxx"), std::string::npos) << "never shows the content";
}

}  // namespace secret_file_test
