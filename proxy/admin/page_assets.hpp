#pragma once
/** The admin page's files (proxy/admin/page/: index.html, app.js, app.css), compiled into the
    binary by CMakeLists.txt so the page needs nothing from outside: no file to install, no
    external asset for the browser to fetch. */
#include <array>
#include <string_view>

namespace rebound::admin {

struct page_asset {
  std::string_view path;          ///< where the admin listener serves it
  std::string_view content_type;  ///< UTF-8, all of them
  std::string_view body;
};

const std::array<page_asset, 3>& page_assets();

}  // namespace rebound::admin
