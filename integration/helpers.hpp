// Shared test helpers: request builders and the check for rebound-made error responses.
#pragma once

#include "client.hpp"
#include "rebound_process.hpp"
#include "scripted_upstream.hpp"
#include "wire.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace itest {

// "GET http://authority/path HTTP/1.1" with Host: authority, `extra` header lines
// ("Name: value\r\n" each) and a body (Content-Length added when non-empty).
std::string absolute_request(std::string_view method, std::string_view authority, std::string_view path,
                             std::string_view extra = {}, std::string_view body = {});

// The same with Transfer-Encoding: chunked, `body` sent in chunks of 7,000 bytes.
std::string chunked_request(std::string_view method, std::string_view authority, std::string_view path,
                            std::string_view body, std::string_view extra = {});

// A scripted answer with `status` and the body "x".
Script respond(unsigned status);

// Checks status, `Rebound-Error` ∈ types, and the JSON body
// {"error": {"type": <same>, "message": "...", "dependency": "...", "attempts": N}}.
::testing::AssertionResult IsReboundError(const std::optional<Response>& r, unsigned status,
                                          std::initializer_list<std::string_view> types);

// rebound's Via entry on a request it forwarded: `1.1 rebound (TOKEN)`, TOKEN being the
// instance's 8 hex digits (its loop-detection mark).
::testing::AssertionResult IsReboundRequestVia(std::string_view via);

}  // namespace itest
