// Memory and hashing for the C++ checker's tables: the search's cache and the models' tables.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lin {

// Memory for the large tables. A block of 2 MB or more is 2 MB-aligned and the kernel is asked
// to back it with huge pages (fewer page faults and TLB misses: before, checking kv/c50-ok spent
// a fifth of its time in page faults). Smaller blocks come from malloc as usual.
constexpr size_t HUGE_PAGE = size_t(2) << 20;

inline void* big_alloc(size_t bytes) {
    void* p;
    if (bytes >= HUGE_PAGE) {
        p = std::aligned_alloc(HUGE_PAGE, (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (p != nullptr) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    } else {
        p = std::malloc(bytes);
    }
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

struct BigFree {
    void operator()(void* p) const { std::free(p); }
};

// A growable array that never moves its elements: chunk k holds 1024 * 2^k of them, so
// growing allocates a new chunk instead of copying everything, and an index finds its chunk
// with one leading-zero count. T must be trivially copyable.
template <class T>
class Chunked {
public:
    size_t size() const { return size_; }
    T& operator[](size_t i) {
        size_t j = i + FIRST;
        unsigned k = unsigned(63 - __builtin_clzll(j)) - SHIFT;
        return chunks_[k].get()[j - (FIRST << k)];
    }
    const T& operator[](size_t i) const { return const_cast<Chunked*>(this)->operator[](i); }
    T& push_back(const T& v) {
        size_t j = size_ + FIRST;
        unsigned k = unsigned(63 - __builtin_clzll(j)) - SHIFT;
        if (k == chunks_.size()) {
            chunks_.emplace_back(static_cast<T*>(big_alloc(sizeof(T) * (FIRST << k))));
        }
        T* slot = chunks_[k].get() + (j - (FIRST << k));
        *slot = v;
        ++size_;
        return *slot;
    }

private:
    static constexpr unsigned SHIFT = 10;
    static constexpr size_t FIRST = size_t(1) << SHIFT;
    static_assert(std::is_trivially_copyable_v<T>, "Chunked holds trivially copyable elements");
    std::vector<std::unique_ptr<T, BigFree>> chunks_;
    size_t size_ = 0;
};

// A well-mixed 64-bit hash of x (splitmix64's finaliser).
inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// A small direct-mapped memo of recent results (an int32 per key, -1 for none), allocated on
// first use: the search retries the same few steps from the same states, and this answers them
// without a lookup in a big table. A slot holds the key's result when its key is the key.
template <class Key, unsigned BITS>
class Recent {
public:
    struct Slot {
        Key key{};
        int32_t value = -1;
    };
    // The slot of a key whose well-mixed hash is `hash`.
    Slot& slot(uint64_t hash) {
        if (slots_.empty()) slots_.resize(size_t(1) << BITS);
        return slots_[hash >> (64 - BITS)];
    }

private:
    std::vector<Slot> slots_;
};

// Chained hashing for the checker's tables (the search's cache, the models' strings and maps):
// the caller keeps its entries in an arena, each with a link to the next entry of its bucket
// and a 32-bit tag (the high half of a well-mixed hash); this class keeps only the heads of
// the chains, four bytes a bucket, one bucket per entry at most, so the table of a few hundred
// thousand entries stays in the processor's second-level cache. Entries of different hashes
// share a bucket: the caller compares the tag, then the entry in full.
class Buckets {
public:
    int32_t& head(uint32_t tag) { return heads_.get()[tag >> shift_]; }

    // Call with the number of entries after adding one: when there are more entries than
    // buckets the table doubles and every entry i < count is chained again, by tag_of(i) and
    // the link next_of(i) returns a reference to.
    template <class TagOf, class NextOf>
    void added(size_t count, TagOf tag_of, NextOf next_of) {
        if (count <= size_) return;
        --shift_;
        resize(size_ * 2);
        for (size_t i = 0; i < count; ++i) {
            int32_t& h = head(tag_of(i));
            next_of(i) = h;
            h = int32_t(i);
        }
    }

    Buckets() { resize(1024); }

private:
    void resize(size_t n) {
        heads_.reset(static_cast<int32_t*>(big_alloc(n * sizeof(int32_t))));
        std::fill(heads_.get(), heads_.get() + n, -1);
        size_ = n;
    }

    std::unique_ptr<int32_t, BigFree> heads_;
    size_t size_ = 0;
    unsigned shift_ = 32 - 10;
};

}  // namespace lin
