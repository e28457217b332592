// A small open-addressing table from a 64-bit hash to the head of a chain (an int32 index
// into an arena the caller keeps): the search's cache and the models' string tables use it, so
// neither allocates per entry.
#pragma once

#include <cstdint>
#include <vector>

namespace lin {

// Open addressing from a 64-bit key to the head of a chain (an int32 index into the caller's
// arena; -1 is an empty chain). Key and head share one slot, so a lookup touches one cache line.
class HashIndex {
public:
    HashIndex() : slots_(1024) {}

    // The head of the chain for `key`, created empty if new.
    int32_t* find(uint64_t key) {
        if (2 * (used_ + 1) > slots_.size()) grow();
        size_t mask = slots_.size() - 1;
        for (size_t i = spread(key) & mask;; i = (i + 1) & mask) {
            Slot& s = slots_[i];
            if (!s.full) {
                s.full = 1;
                s.key = key;
                s.head = -1;
                ++used_;
                return &s.head;
            }
            if (s.key == key) return &s.head;
        }
    }

private:
    struct Slot {
        uint64_t key = 0;
        int32_t head = -1;
        int32_t full = 0;
    };

    static size_t spread(uint64_t x) {   // every bit of the key into the low bits
        x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        return size_t(x);
    }

    void grow() {
        std::vector<Slot> old(slots_.size() * 2);
        old.swap(slots_);
        size_t mask = slots_.size() - 1;
        for (const Slot& s : old) {
            if (!s.full) continue;
            size_t i = spread(s.key) & mask;
            while (slots_[i].full) i = (i + 1) & mask;
            slots_[i] = s;
        }
    }

    std::vector<Slot> slots_;
    size_t used_ = 0;
};

// The search's cache index: a 32-bit tag (the high half of a well-mixed 64-bit hash) to the
// head of a chain, in 8-byte slots, so the table of a million entries stays in a few MB of
// cache. Different hashes may share a tag and so a chain: the caller compares every chained
// entry in full anyway. A slot is empty while its head is -1, so the caller must store a head
// in the slot that find returns.
class TagIndex {
public:
    TagIndex() : slots_(1024) {}

    int32_t* find(uint64_t key) {
        if (4 * (used_ + 1) > 3 * slots_.size()) grow();
        uint32_t tag = uint32_t(key >> 32);
        size_t mask = slots_.size() - 1;
        for (size_t i = tag & mask;; i = (i + 1) & mask) {
            Slot& s = slots_[i];
            if (s.head < 0) {
                s.tag = tag;
                ++used_;
                return &s.head;
            }
            if (s.tag == tag) return &s.head;
        }
    }

private:
    struct Slot {
        uint32_t tag = 0;
        int32_t head = -1;
    };

    void grow() {
        std::vector<Slot> old(slots_.size() * 2);
        old.swap(slots_);
        size_t mask = slots_.size() - 1;
        for (const Slot& s : old) {
            if (s.head < 0) continue;
            size_t i = s.tag & mask;
            while (slots_[i].head >= 0) i = (i + 1) & mask;
            slots_[i] = s;
        }
    }

    std::vector<Slot> slots_;
    size_t used_ = 0;
};

}  // namespace lin
