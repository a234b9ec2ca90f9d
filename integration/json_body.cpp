// The tests' view of a JSON body (client.hpp: Json), read with Boost.JSON, strictly: a body
// that is not one well-formed JSON text is no value.
#include "client.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

namespace itest {

const Json* Json::get(std::string_view key) const {
  if (type != Type::object) return nullptr;
  for (auto const& [k, v] : o)
    if (k == key) return &v;
  return nullptr;
}

namespace {

Json from(const boost::json::value& v) {
  Json out;
  switch (v.kind()) {
    case boost::json::kind::null:
      break;
    case boost::json::kind::bool_:
      out.type = Json::Type::boolean;
      out.b = v.get_bool();
      break;
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_:
      out.type = Json::Type::number;
      out.n = v.to_number<double>();
      break;
    case boost::json::kind::string:
      out.type = Json::Type::string;
      out.s = std::string(v.get_string());
      break;
    case boost::json::kind::array:
      out.type = Json::Type::array;
      for (auto const& item : v.get_array()) out.a.push_back(from(item));
      break;
    case boost::json::kind::object:
      out.type = Json::Type::object;
      for (auto const& member : v.get_object()) out.o.emplace_back(std::string(member.key()), from(member.value()));
      break;
  }
  return out;
}

}  // namespace

std::optional<Json> parse_json(std::string_view text) {
  boost::system::error_code ec;
  auto const v = boost::json::parse(text, ec);
  if (ec) return std::nullopt;
  return from(v);
}

}  // namespace itest
