#include "proxy/runtime/relay_buffers.hpp"

namespace rebound::runtime {

relay_buffers::lease relay_buffers::take(std::size_t size) {
  auto spare = spares_of(size).take();
  return lease(this, spare ? std::move(*spare) : std::make_unique_for_overwrite<char[]>(size), size);
}

relay_buffers::lease relay_buffers::take_from(relay_buffers* pool, std::size_t size) {
  return pool ? pool->take(size) : lease(nullptr, std::make_unique_for_overwrite<char[]>(size), size);
}

void relay_buffers::give_back(std::unique_ptr<char[]> b, std::size_t size) { spares_of(size).give(std::move(b)); }

}  // namespace rebound::runtime
