#pragma once
/** The field storage of every HTTP/1.1 head rebound parses or builds, and the message types
    over it.

    Why not Beast's `fields`: `basic_fields` allocates one block per field, and a proxied GET
    parses two heads and edits both, about seventeen blocks of 64-128 bytes that glibc's
    per-thread cache (seven per size) mostly misses with many connections in flight, so they
    went through malloc's slow path on every request. `head_allocator` keeps the blocks a
    thread frees in lists by size and hands them to the next head that thread parses.

    The lists belong to the thread, like Asio's own recycling cache: a block freed on another
    thread joins that thread's lists, each list is bounded (`head_blocks_kept`), and what a
    thread keeps goes back to malloc when it ends. Under AddressSanitizer every block goes
    straight to operator new and delete, so a use after free is still seen. */
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include <cstddef>
#include <new>
#include <type_traits>

namespace rebound::http {

/// A block of at least `bytes` from this thread's lists, or from operator new.
void* take_head_block(std::size_t bytes);
/// Gives back a block `take_head_block(bytes)` returned, on any thread.
void give_head_block(void* block, std::size_t bytes) noexcept;
/// How many blocks of one size class a thread keeps at most.
inline constexpr std::size_t head_blocks_kept = 256;
/// Whether blocks are kept at all: not under AddressSanitizer (GCC's macro, clang's feature test).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool head_blocks_reused = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool head_blocks_reused = false;
#else
inline constexpr bool head_blocks_reused = true;
#endif
#else
inline constexpr bool head_blocks_reused = true;
#endif

template <class T>
class head_allocator {
 public:
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "blocks are aligned as operator new aligns");
  using value_type = T;
  using is_always_equal = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;

  head_allocator() noexcept = default;
  template <class U>
  head_allocator(const head_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(take_head_block(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { give_head_block(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const head_allocator<U>&) const noexcept {
    return true;
  }
};

using head_fields = boost::beast::http::basic_fields<head_allocator<char>>;
template <class Body>
using request_message = boost::beast::http::request<Body, head_fields>;
template <class Body>
using response_message = boost::beast::http::response<Body, head_fields>;
using request_head = boost::beast::http::request_header<head_fields>;
using response_head = boost::beast::http::response_header<head_fields>;

}  // namespace rebound::http
