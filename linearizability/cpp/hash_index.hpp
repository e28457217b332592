// A small open-addressing table from a 64-bit hash to the head of a chain (an int32 index
// into an arena the caller keeps): the search's cache and the models' string tables use it, so
// neither allocates per entry.
#pragma once

#include <cstdint>
#include <vector>

namespace lin {

// Open addressing from a 64-bit hash to an int32 slot value (-1: empty chain).
class HashIndex {
public:
    HashIndex() : keys_(1024), heads_(1024, -1), full_(1024, 0) {}

    // The head of the chain for `hash`, created empty if new.
    int32_t* find(uint64_t hash) {
        size_t mask = keys_.size() - 1;
        for (size_t i = slot(hash) & mask;; i = (i + 1) & mask) {
            if (!full_[i]) {
                if (2 * (used_ + 1) > keys_.size()) {
                    grow();
                    return find(hash);
                }
                full_[i] = 1;
                keys_[i] = hash;
                ++used_;
                return &heads_[i];
            }
            if (keys_[i] == hash) return &heads_[i];
        }
    }

private:
    static size_t slot(uint64_t x) {   // spread every bit of the key over the low bits
        x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        return size_t(x);
    }

    void grow() {
        std::vector<uint64_t> keys(keys_.size() * 2);
        std::vector<int32_t> heads(keys_.size() * 2, -1);
        std::vector<uint8_t> full(keys_.size() * 2, 0);
        size_t mask = keys.size() - 1;
        for (size_t j = 0; j < keys_.size(); ++j) {
            if (!full_[j]) continue;
            size_t i = slot(keys_[j]) & mask;
            while (full[i]) i = (i + 1) & mask;
            full[i] = 1;
            keys[i] = keys_[j];
            heads[i] = heads_[j];
        }
        keys_.swap(keys);
        heads_.swap(heads);
        full_.swap(full);
    }

    std::vector<uint64_t> keys_;
    std::vector<int32_t> heads_;
    std::vector<uint8_t> full_;
    size_t used_ = 0;
};

}  // namespace lin
