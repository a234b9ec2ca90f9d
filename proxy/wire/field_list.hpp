#pragma once
/** The fields of an upstream's response head as they arrived: their bytes in one string, an
    index entry per field, both emptied but kept for the next head the exchange reads.

    Why not `basic_fields`: it allocates a block per field and links each into a list and a
    tree with case-insensitive compares, and a proxied answer's head is then edited
    (hop-by-hop fields, Via, framing, Rebound-Attempts) and written out once, in order. Here
    a field is a copy of its bytes into a string that keeps its capacity across requests and
    an entry in a vector that does too: no allocation per head once an exchange is warm, no
    tree, and writing the head is a walk of the entries (bench/README.md, issue 47).
    Iterators, like the views they give, last until the next insert or set.

    An erased field stays in the index, marked, so iterators stay valid while a walk erases;
    `set` erases and appends, so an edited field moves to the end, as it would be sent.
    Lookups by name are linear: a response head has a dozen fields, and each is looked up a
    few times at most. */
#include <boost/beast/http/field.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::http {

class field_list {
  struct entry {
    boost::beast::http::field name;
    std::uint32_t at;  ///< offset of the name in bytes_; the value follows it directly
    std::uint32_t name_size;
    std::uint32_t value_size;
    bool erased;
  };

 public:
  /// One field as iteration shows it, spelled as basic_fields' value_type is.
  class value_type {
   public:
    boost::beast::http::field name() const { return entry_->name; }
    std::string_view name_string() const { return {bytes_ + entry_->at, entry_->name_size}; }
    std::string_view value() const { return {bytes_ + entry_->at + entry_->name_size, entry_->value_size}; }

   private:
    friend class field_list;
    const char* bytes_ = nullptr;
    const entry* entry_ = nullptr;
  };

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = field_list::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;

    const_iterator() = default;
    reference operator*() const { return current_; }
    pointer operator->() const { return &current_; }
    const_iterator& operator++() {
      ++current_.entry_;
      skip_erased();
      return *this;
    }
    const_iterator operator++(int) {
      auto was = *this;
      ++*this;
      return was;
    }
    bool operator==(const const_iterator& o) const { return current_.entry_ == o.current_.entry_; }

   private:
    friend class field_list;
    const_iterator(const field_list& list, const entry* at) : end_(list.entries_.data() + list.entries_.size()) {
      current_.bytes_ = list.bytes_.data();
      current_.entry_ = at;
      skip_erased();
    }
    void skip_erased() {
      while (current_.entry_ != end_ && current_.entry_->erased) ++current_.entry_;
    }
    const entry* end_ = nullptr;
    value_type current_;
  };
  using iterator = const_iterator;

  const_iterator begin() const { return {*this, entries_.data()}; }
  const_iterator end() const { return {*this, entries_.data() + entries_.size()}; }

  /// The memory the list holds, used or kept: what a recycled exchange carries.
  std::size_t capacity_bytes() const { return bytes_.capacity() + entries_.capacity() * sizeof(entry); }

  /// Empties the list and keeps its memory for the next head.
  void clear() {
    bytes_.clear();
    entries_.clear();
  }

  /// Appends a field; `name_string` is its spelling as received.
  void insert(boost::beast::http::field name, std::string_view name_string, std::string_view value);
  void insert(boost::beast::http::field name, std::string_view value) {
    insert(name, boost::beast::http::to_string(name), value);
  }
  /// Replaces every field of that name with one holding `value`, at the end.
  void set(boost::beast::http::field name, std::string_view value);
  void set(std::string_view name, std::string_view value);

  const_iterator erase(const_iterator it);
  /// Erases every field of that name; how many there were.
  std::size_t erase(boost::beast::http::field name);

  const_iterator find(boost::beast::http::field name) const;
  const_iterator find(std::string_view name) const;
  std::size_t count(boost::beast::http::field name) const;
  /// The first such field's value, or empty.
  std::string_view operator[](boost::beast::http::field name) const;

 private:
  bool same_name(const entry& e, std::string_view name) const;
  const_iterator at(const entry& e) const { return {*this, &e}; }

  std::string bytes_;
  std::vector<entry> entries_;
};

}  // namespace rebound::http
