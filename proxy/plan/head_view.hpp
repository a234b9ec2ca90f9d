#pragma once
/** A request head as the plan reads it, whichever door it came through: an HTTP/1.1 head
    (Beast's fields), an HTTP/2 call's fields, a stored task's. Each request field the plan
    needs (the correlation fields, traceparent, the caller's deadline, Authorization, the
    idempotency key) is read through this view in one place, so a rule about a field is
    written once, not once per door. Field names compare without regard to case. */
#include "proxy/h2/message.hpp"

#include <boost/beast/core/string.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace rebound::plan {

class head_view {
 public:
  /// The first field named `name`, and how many there are (a repeated key is two keys).
  struct lookup {
    std::optional<std::string_view> first;
    unsigned count = 0;
  };
  virtual lookup find(std::string_view name) const = 0;

  /// The first value of `name`, empty when the head has none.
  std::string_view value(std::string_view name) const { return find(name).first.value_or(std::string_view()); }

  /// Calls `take(value)` for each field named `name`, in order (a list such as X-Request-Timeout).
  template <class F>
  void each(std::string_view name, F&& take) const {
    visit(name, &take, [](void* f, std::string_view v) { (*static_cast<std::remove_reference_t<F>*>(f))(v); });
  }

 protected:
  ~head_view() = default;
  virtual void visit(std::string_view name, void* take, void (*call)(void*, std::string_view)) const = 0;
};

/// An HTTP/1.1 head: Beast's fields (`basic_fields`, `head_fields`), looked up by its index.
template <class Fields>
class fields_view final : public head_view {
 public:
  explicit fields_view(const Fields& f) : fields_(f) {}

  lookup find(std::string_view name) const override {
    auto const [first, last] = fields_.equal_range(name);
    lookup l;
    for (auto it = first; it != last; ++it) {
      if (l.count++ == 0) l.first = std::string_view(it->value().data(), it->value().size());
    }
    return l;
  }

 private:
  void visit(std::string_view name, void* take, void (*call)(void*, std::string_view)) const override {
    auto const [first, last] = fields_.equal_range(name);
    for (auto it = first; it != last; ++it) call(take, std::string_view(it->value().data(), it->value().size()));
  }
  const Fields& fields_;
};

inline std::string_view name_of(const h2::field& f) { return f.name; }
inline std::string_view value_of(const h2::field& f) { return f.value; }
inline std::string_view name_of(const std::pair<std::string, std::string>& f) { return f.first; }
inline std::string_view value_of(const std::pair<std::string, std::string>& f) { return f.second; }

/** A head kept as a list of fields, read in order: an HTTP/2 call's (`h2::fields`, names
    lower-case) or a stored task's (`name, value` pairs, as the app sent them). */
template <class List>
class list_view final : public head_view {
 public:
  explicit list_view(const List& fields) : fields_(fields) {}

  lookup find(std::string_view name) const override {
    lookup l;
    for (auto const& f : fields_)
      if (boost::beast::iequals(name_of(f), name) && l.count++ == 0) l.first = value_of(f);
    return l;
  }

 private:
  void visit(std::string_view name, void* take, void (*call)(void*, std::string_view)) const override {
    for (auto const& f : fields_)
      if (boost::beast::iequals(name_of(f), name)) call(take, value_of(f));
  }
  const List& fields_;
};

}  // namespace rebound::plan
