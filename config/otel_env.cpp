#include "config/otel_env.hpp"

#include "config/typed_values.hpp"

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <system_error>

namespace rebound::config {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

/// W3C Baggage's percent-encoding, which both lists use for their values.
std::optional<std::string> percent_decoded(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      return std::nullopt;
    out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

/// `key1=value1,key2=value2` (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES); nothing
/// when an entry is malformed.
std::optional<std::vector<std::pair<std::string, std::string>>> key_values(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    auto const comma = text.find(',');
    auto const entry = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (entry.empty()) continue;
    auto const eq = entry.find('=');
    if (eq == std::string_view::npos || trim(entry.substr(0, eq)).empty()) return std::nullopt;
    auto value = percent_decoded(trim(entry.substr(eq + 1)));
    if (!value) return std::nullopt;
    out.emplace_back(std::string(trim(entry.substr(0, eq))), std::move(*value));
  }
  return out;
}

/// OpenTelemetry's variables as the functions below read them, and where their findings go.
struct otel_reader {
  const environment& env;
  std::vector<diagnostic>& errors;
  std::vector<diagnostic>& warnings;

  void error(std::string_view variable, std::string message) const {
    errors.push_back({"environment", 0, 0, std::string(variable), std::move(message), "", false});
  }
  void warn(std::string_view variable, std::string message) const {
    warnings.push_back({"environment", 0, 0, std::string(variable), std::move(message), "", true});
  }
  /// Set and not empty: OpenTelemetry treats an empty variable as unset.
  std::optional<std::string> get(std::string_view name) const {
    auto v = env(name);
    if (v && trim(*v).empty()) return std::nullopt;
    return v;
  }
  /// The signal-specific variable, else the generic one: its value and the name it came from.
  std::optional<std::pair<std::string, std::string_view>> either(std::string_view traces,
                                                                 std::string_view generic) const {
    if (auto v = get(traces)) return std::make_pair(*v, traces);
    if (auto v = get(generic)) return std::make_pair(*v, generic);
    return std::nullopt;
  }
};

/// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT with v1/traces.
void apply_endpoint(const otel_reader& r, config::tracing_settings& t) {
  std::optional<std::string> url;
  std::string_view from;
  if (auto v = r.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
    url = std::string(trim(*v));
    from = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
  } else if (auto base = r.get("OTEL_EXPORTER_OTLP_ENDPOINT")) {
    std::string b(trim(*base));
    if (!b.empty() && b.back() != '/') b += '/';
    url = b + "v1/traces";
    from = "OTEL_EXPORTER_OTLP_ENDPOINT";
  }
  if (url) {
    auto u = parse_service_url(*url);
    if (!u.value)
      r.error(from, u.error);
    else
      t.endpoint = std::move(*u.value);
  }
}

/// OTLP's headers: HTTP field names, values percent-encoded.
void apply_headers(const otel_reader& r, config::tracing_settings& t) {
  if (auto v = r.either("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")) {
    auto kv = key_values(v->first);
    bool fields_ok = kv.has_value();
    if (kv)
      for (auto const& [name, value] : *kv)
        if (!parse_header_name(name).value || value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
          fields_ok = false;
    if (fields_ok)
      t.headers = std::move(*kv);
    else
      r.error(v->second, "must be name=value pairs separated by commas: HTTP field names, values percent-encoded");
  }
}

/// The export timeout, whole milliseconds.
void apply_timeout(const otel_reader& r, config::tracing_settings& t) {
  if (auto v = r.either("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")) {
    auto const text = trim(v->first);
    std::int64_t ms = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || ms <= 0 || ms > 600000)
      r.error(v->second, "must be a whole number of milliseconds between 1 and 600000");
    else
      t.timeout = std::chrono::milliseconds(ms);
  }
}

/// OTEL_TRACES_SAMPLER and its argument, as a ratio and whether a caller's choice is followed.
void apply_sampler(const otel_reader& r, const yaml_given& given, config::tracing_settings& t) {
  if (auto v = r.get("OTEL_TRACES_SAMPLER")) {
    auto const name = std::string(trim(*v));
    std::optional<double> ratio;
    if (name == "always_on" || name == "parentbased_always_on") {
      ratio = 1.0;
    } else if (name == "always_off" || name == "parentbased_always_off") {
      ratio = 0.0;
    } else if (name == "traceidratio" || name == "parentbased_traceidratio") {
      ratio = 1.0;  // the specification's default argument
      if (auto arg = r.get("OTEL_TRACES_SAMPLER_ARG")) {
        auto const given_ratio = parse_ratio(trim(*arg));
        if (!given_ratio.value)
          r.error("OTEL_TRACES_SAMPLER_ARG", "must be a ratio between 0 and 1");
        else
          ratio = *given_ratio.value;
      }
    } else {
      r.error("OTEL_TRACES_SAMPLER",
              "must be always_on, always_off, traceidratio or their parentbased_ forms (not \"" + name + "\")");
    }
    if (ratio) {
      t.follow_caller = name.starts_with("parentbased_");
      if (!given.sample_ratio) t.sample_ratio = *ratio;
    }
  }
}

}  // namespace

std::optional<std::string> process_environment(std::string_view name) {
  if (char const* v = std::getenv(std::string(name).c_str())) return std::string(v);
  return std::nullopt;
}

void apply_otel_environment(config& c, const yaml_given& given, const environment& env, std::vector<diagnostic>& errors,
                            std::vector<diagnostic>& warnings) {
  otel_reader const r{env, errors, warnings};
  auto& t = c.tracing;
  if (auto v = r.get("OTEL_SDK_DISABLED")) {
    auto const off = parse_bool(trim(*v));
    if (!off.value) return r.error("OTEL_SDK_DISABLED", "must be true or false");
    if (*off.value) {
      t.endpoint.reset();
      return;
    }
  }
  if (!given.service)
    if (auto v = r.get("OTEL_SERVICE_NAME")) t.service_name = std::string(trim(*v));
  if (auto v = r.get("OTEL_RESOURCE_ATTRIBUTES")) {
    if (auto kv = key_values(*v))
      t.resource = std::move(*kv);
    else
      r.error("OTEL_RESOURCE_ATTRIBUTES", "must be key=value pairs separated by commas, values percent-encoded");
  }
  if (!given.endpoint) apply_endpoint(r, t);
  apply_headers(r, t);
  if (!given.timeout) apply_timeout(r, t);
  if (!given.ca_file)
    if (auto v = r.either("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"))
      t.ca_file = std::string(trim(v->first));
  if (auto v = r.either("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL");
      v && trim(v->first) != "http/json")
    r.warn(v->second, "rebound exports OTLP over HTTP with the JSON encoding (http/json), not " +
                          std::string(trim(v->first)) + "; every OTLP/HTTP receiver takes it");
  apply_sampler(r, given, t);
}

}  // namespace rebound::config
