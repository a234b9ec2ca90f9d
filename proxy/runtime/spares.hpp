#pragma once
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace rebound::runtime {

/** What a worker keeps for reuse instead of freeing it (exchanges with their read buffers,
    relay buffers): as many as the busiest moment since the last trim needed, up to `cap`,
    so a busy worker takes them instead of going to malloc for each request. `trim()` runs
    every second (app/worker.cpp) and frees those no take reached since the trim before (the
    low-water mark: that many were not needed), down to `floor`, so a burst's memory goes
    back within two seconds of its end and an idle connection is not charged for it
    (bench/README.md, idle memory). The warmest is taken first, the coldest freed first.
    A worker's thread owns it: no lock. */
template <typename T>
class spares {
 public:
  spares(std::size_t floor, std::size_t cap) : floor_(floor), cap_(cap) {}

  /// The most recently given back, or none when all are out.
  std::optional<T> take() {
    if (items_.empty()) {
      low_ = 0;
      return std::nullopt;
    }
    std::optional<T> t(std::move(items_.back()));
    items_.pop_back();
    low_ = std::min(low_, items_.size());
    return t;
  }

  /// Keeps `t` for the next take unless `cap` are kept already (then `t` is freed).
  void give(T&& t) {
    if (items_.size() < cap_) items_.push_back(std::move(t));
  }

  /// Frees the spares no take reached since the last trim, keeping at least `floor`.
  void trim() {
    auto const unused = std::min(low_, items_.size());
    auto const keep = std::max(floor_, items_.size() - unused);
    if (items_.size() > keep)
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(items_.size() - keep));
    low_ = items_.size();
  }

  std::size_t size() const { return items_.size(); }

 private:
  std::vector<T> items_;
  std::size_t low_ = 0;  ///< the fewest kept since the last trim
  std::size_t floor_;
  std::size_t cap_;
};

}  // namespace rebound::runtime
