#pragma once
/** A secret kept in a file an operator or a Kubernetes Secret mount renews: a bearer token,
    an OAuth2 client secret, the admin token. One reading rule for all of them: the content
    without surrounding whitespace (the line end an editor leaves). */
#include <optional>
#include <string>

namespace rebound::auth {

struct secret_read {
  std::optional<std::string> value;  ///< set when the file was read; may be empty
  std::string error;                 ///< why not, naming the file (never its content, R-9)
};

/** Reads `path` (at most 64 KiB: a secret, not a document). Errors are values, never
    exceptions: a missing file, a directory (where libstdc++'s filebuf would throw mid-read)
    or an unreadable one say why. */
secret_read read_secret_file(const std::string& path);

}  // namespace rebound::auth
