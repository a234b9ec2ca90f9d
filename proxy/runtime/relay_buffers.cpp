#include "proxy/runtime/relay_buffers.hpp"

namespace rebound::runtime {

relay_buffers::lease relay_buffers::take(std::size_t size) {
  auto& spare = spares(size);
  if (spare.empty()) return lease(this, std::make_unique_for_overwrite<char[]>(size), size);
  auto b = std::move(spare.back());
  spare.pop_back();
  return lease(this, std::move(b), size);
}

relay_buffers::lease relay_buffers::take_from(relay_buffers* pool, std::size_t size) {
  return pool ? pool->take(size) : lease(nullptr, std::make_unique_for_overwrite<char[]>(size), size);
}

void relay_buffers::give_back(std::unique_ptr<char[]> b, std::size_t size) {
  auto& spare = spares(size);
  if (spare.size() < max_spare) spare.push_back(std::move(b));
}

}  // namespace rebound::runtime
