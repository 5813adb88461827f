// A table keyed by a 32-bit id: a graph's values, nodes, storages, modules and params, the
// buffers of an event list, the allocator's blocks and segments. Ids are int32_t (-1 is "none")
// and are handed out as the next index, so a table reads `last_use[storage]` where a
// std::vector would need `last_use[static_cast<size_t>(storage)]` at every access.
//
//   IdVector<int32_t> last_use(graph.storages.size(), kNone);
//   last_use[graph.value(v).storage] = n;
//   const int32_t id = table.next_id();  table.push_back(item);   // id now names item
#pragma once

#include <cassert>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

namespace trainfit {

template <class T>
class IdVector {
 public:
  using value_type = T;
  using reference = typename std::vector<T>::reference;
  using const_reference = typename std::vector<T>::const_reference;
  using iterator = typename std::vector<T>::iterator;
  using const_iterator = typename std::vector<T>::const_iterator;

  IdVector() = default;
  explicit IdVector(size_t n, const T& fill = T()) : items_(n, fill) {}
  IdVector(std::initializer_list<T> items) : items_(items) {}

  // Any integer indexes: an id (int32_t) or a loop counter (size_t). An id must not be negative.
  template <std::integral I>
  reference operator[](I id) {
    return items_[index(id)];
  }
  template <std::integral I>
  const_reference operator[](I id) const {
    return items_[index(id)];
  }

  // The id the next push_back gets.
  int32_t next_id() const { return static_cast<int32_t>(items_.size()); }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void reserve(size_t n) { items_.reserve(n); }
  void resize(size_t n) { items_.resize(n); }
  void assign(size_t n, const T& fill) { items_.assign(n, fill); }
  void clear() { items_.clear(); }
  void push_back(const T& item) { items_.push_back(item); }
  void push_back(T&& item) { items_.push_back(std::move(item)); }
  template <class... Args>
  reference emplace_back(Args&&... args) {
    return items_.emplace_back(std::forward<Args>(args)...);
  }
  reference front() { return items_.front(); }
  const_reference front() const { return items_.front(); }
  reference back() { return items_.back(); }
  const_reference back() const { return items_.back(); }
  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

  const std::vector<T>& items() const { return items_; }

  bool operator==(const IdVector&) const = default;

 private:
  template <std::integral I>
  static size_t index(I id) {
    if constexpr (std::is_signed_v<I>) assert(id >= 0 && "a negative id indexes nothing");
    return static_cast<size_t>(id);
  }

  std::vector<T> items_;
};

}  // namespace trainfit
