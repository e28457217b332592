// The Wing-Gong/Lowe linearizability search as porcupine does it (anishathalye/porcupine,
// checker.go), written anew in C++17.
//
// A partition's history becomes a doubly linked list of call and return entries sorted by
// time. The search walks the list: at a call it tries to linearize that operation now (the
// model's step must accept it and the pair (linearized set, new state) must not be in the
// cache); on success it lifts the call and its return out of the list and starts again at
// the head; at a return it has met an operation that must already have taken effect, so it
// backtracks: pops the last linearized call, unlifts it and tries the next entry. The cache
// of (linearized-set bitset, model state) is never cleared. The history is linearizable when
// the list is empty, and illegal when a return is met with nothing left to undo.
//
// A Search is resumable: run(iterations) does a bounded amount of work, so a scheduler can
// interleave many partitions on a few threads and stop them all when one is illegal.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hash_index.hpp"

namespace lin {

struct Timed {
    int64_t call;
    int64_t ret;
};

struct Entry {
    int32_t id = -1;          // operation id inside the partition, -1 for the list head
    Entry* match = nullptr;   // a call's return entry; nullptr for returns
    Entry* prev = nullptr;
    Entry* next = nullptr;
};

// The set of linearized operations. Besides the words it keeps `lead` (how many leading words
// are all ones) and `top` (one past the last non-zero word), so the cache can store only the
// words between them: in a history that linearizes roughly in time order that is a handful of
// words however long the history is.
class Bitset {
public:
    explicit Bitset(size_t bits) : words_((bits + 63) / 64, 0), keys_(bits) {
        for (size_t i = 0; i < bits; ++i) keys_[i] = mix(0x9e3779b97f4a7c15ULL * (i + 1));
    }

    void set(size_t i) {
        size_t w = i / 64;
        words_[w] |= uint64_t(1) << (i % 64);
        hash_ ^= keys_[i];
        if (w + 1 > top_) top_ = w + 1;
        while (lead_ < words_.size() && words_[lead_] == ~uint64_t(0)) ++lead_;
    }
    void clear(size_t i) {
        size_t w = i / 64;
        words_[w] &= ~(uint64_t(1) << (i % 64));
        hash_ ^= keys_[i];
        if (w < lead_) lead_ = w;
        while (top_ > 0 && words_[top_ - 1] == 0) --top_;
    }
    // Zobrist hashing: the XOR of a random key per member, kept up to date by set and clear.
    uint64_t hash() const { return hash_; }
    size_t lead() const { return lead_; }
    size_t top() const { return std::max(top_, lead_); }
    const uint64_t* middle() const { return words_.data() + lead_; }
    size_t middle_size() const { return top() - lead_; }

    static uint64_t mix(uint64_t x) {
        x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 27; x *= 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
    }

private:
    std::vector<uint64_t> words_;
    std::vector<uint64_t> keys_;
    uint64_t hash_ = 0;
    size_t lead_ = 0;
    size_t top_ = 0;
};

enum class Status { Running, Ok, Illegal, Unknown };

// Shared by all partitions of one check: a stop flag (set by the first illegal partition, the
// deadline or the memory cap) and the bytes held by every cache.
struct Budget {
    std::atomic<bool> stop{false};
    std::atomic<int64_t> bytes{0};
    int64_t bytes_max = 0;   // 0: no cap
};

// Model concept (one instance per Search, so an incremental model may keep mutable tables):
//   using Op = ...; using State = ...;
//   State init();
//   bool step(const State&, const Op&, State& next);     // may the op take effect now?
//   bool equal(const State&, const State&) const;
//   uint64_t hash(const State&) const;
//   size_t bytes(const State&) const;                     // for the memory cap
//   void apply(const Op&); void undo(const Op&);          // the op was linearized / undone
//   int64_t take_bytes();                                 // bytes the model allocated since
template <class Model>
class Search {
public:
    using Op = typename Model::Op;
    using State = typename Model::State;

    Search(Model model, std::vector<Op> ops, const std::vector<Timed>& times, Budget* budget, bool partial)
        : model_(std::move(model)), ops_(std::move(ops)), linearized_(ops_.size()), budget_(budget),
          partial_(partial) {
        build_list(times);
        state_ = model_.init();
        entry_ = head_.next;
    }
    Search(const Search&) = delete;
    Search& operator=(const Search&) = delete;

    ~Search() { budget_->bytes.fetch_sub(bytes_held_); }

    Status status() const { return status_; }
    size_t size() const { return ops_.size(); }
    uint64_t iterations() const { return iterations_; }
    size_t cache_entries() const { return cache_entries_; }
    const std::vector<int32_t>& longest() const { return longest_; }
    int32_t blocked() const { return blocked_; }

    // Work for at most `iterations` steps; returns the status afterwards.
    Status run(uint64_t iterations) {
        if (status_ != Status::Running) return status_;
        if (ops_.empty()) return status_ = Status::Ok;
        for (uint64_t i = 0; i < iterations; ++i) {
            if (head_.next == nullptr) {
                if (partial_) record_longest(-1);
                publish_bytes();
                return status_ = Status::Ok;
            }
            ++iterations_;
            if (entry_->match != nullptr) {
                try_linearize();
            } else if (!backtrack()) {
                publish_bytes();
                return status_ = Status::Illegal;
            }
        }
        publish_bytes();
        if (budget_->bytes_max > 0 && budget_->bytes.load(std::memory_order_relaxed) > budget_->bytes_max) {
            status_ = Status::Unknown;
        }
        return status_;
    }

private:
    // The cache: a hash table from hash to the first of a chain of entries; the entries and
    // the words of their bitsets live in two arenas (no allocation per entry).
    // The middle words of a bitset are kept in the entry when there are at most two (the usual
    // case: one memory access per lookup), else in the words_ arena from inline_[0] on.
    struct CacheEntry {
        int32_t next;      // next entry with the same hash, -1 at the end
        uint32_t lead;     // leading all-ones words of the bitset
        uint64_t words;    // how many middle words
        uint64_t inline_[2];
        State state;

        const uint64_t* middle(const std::vector<uint64_t>& arena) const {
            return words <= 2 ? inline_ : arena.data() + inline_[0];
        }
    };
    struct Frame {
        Entry* entry;
        State state;
    };

    void build_list(const std::vector<Timed>& times) {
        size_t n = ops_.size();
        nodes_.resize(2 * n);
        // (time, kind, op): calls (kind 0) sort before returns (kind 1) at equal times, so
        // operations that touch at one instant count as concurrent, as in porcupine.
        std::vector<std::tuple<int64_t, int, int32_t>> order;
        order.reserve(2 * n);
        for (size_t i = 0; i < n; ++i) {
            order.emplace_back(times[i].call, 0, int32_t(i));
            order.emplace_back(times[i].ret, 1, int32_t(i));
        }
        std::sort(order.begin(), order.end());
        Entry* last = &head_;
        for (auto& [time, kind, id] : order) {
            (void)time;
            Entry* e = &nodes_[kind == 0 ? 2 * size_t(id) : 2 * size_t(id) + 1];
            e->id = id;
            if (kind == 0) e->match = &nodes_[2 * size_t(id) + 1];
            e->prev = last;
            last->next = e;
            last = e;
        }
        last->next = nullptr;
    }

    static void lift(Entry* call) {
        call->prev->next = call->next;
        if (call->next) call->next->prev = call->prev;
        Entry* ret = call->match;
        ret->prev->next = ret->next;
        if (ret->next) ret->next->prev = ret->prev;
    }
    static void unlift(Entry* call) {
        Entry* ret = call->match;
        ret->prev->next = ret;
        if (ret->next) ret->next->prev = ret;
        call->prev->next = call;
        if (call->next) call->next->prev = call;
    }

    void try_linearize() {
        const Op& op = ops_[size_t(entry_->id)];
        State next{};
        bool ok = model_.step(state_, op, next);
        unpublished_bytes_ += model_.take_bytes();
        if (!ok) {
            entry_ = entry_->next;
            return;
        }
        linearized_.set(size_t(entry_->id));
        uint64_t h = linearized_.hash() ^ Bitset::mix(model_.hash(next));
        if (cache_insert(h, next)) {
            calls_.push_back(Frame{entry_, std::move(state_)});
            state_ = std::move(next);
            model_.apply(op);
            lift(entry_);
            entry_ = head_.next;
        } else {
            linearized_.clear(size_t(entry_->id));
            entry_ = entry_->next;
        }
    }

    // False when there is nothing left to undo: the history is not linearizable.
    bool backtrack() {
        if (partial_) record_longest(entry_->id);
        if (calls_.empty()) return false;
        Frame top = std::move(calls_.back());
        calls_.pop_back();
        model_.undo(ops_[size_t(top.entry->id)]);
        state_ = std::move(top.state);
        linearized_.clear(size_t(top.entry->id));
        unlift(top.entry);
        entry_ = top.entry->next;
        return true;
    }

    // Adds (linearized, state) to the cache unless it is there already.
    bool cache_insert(uint64_t h, const State& state) {
        uint32_t lead = uint32_t(linearized_.lead());
        size_t words = linearized_.middle_size();
        const uint64_t* middle = linearized_.middle();
        int32_t* head = cache_.find(h);
        for (int32_t i = *head; i >= 0; i = nodes_cache_[size_t(i)].next) {
            const CacheEntry& c = nodes_cache_[size_t(i)];
            if (c.lead != lead || c.words != words || !model_.equal(c.state, state)) continue;
            const uint64_t* stored = c.middle(words_);
            size_t w = 0;
            while (w < words && stored[w] == middle[w]) ++w;
            if (w == words) return false;
        }
        CacheEntry& c = nodes_cache_.emplace_back(CacheEntry{*head, lead, words, {0, 0}, state});
        if (words <= 2) {
            std::copy(middle, middle + words, c.inline_);
        } else {
            c.inline_[0] = words_.size();
            words_.insert(words_.end(), middle, middle + words);
        }
        *head = int32_t(nodes_cache_.size() - 1);
        ++cache_entries_;
        unpublished_bytes_ += int64_t(sizeof(CacheEntry) + (words > 2 ? words * 8 : 0) + model_.bytes(state) + 16);
        return true;
    }

    // The cache's growth is added to the shared budget once a slice, not at every insert (an
    // atomic add per insert cost a sixth of the search's time).
    void publish_bytes() {
        if (unpublished_bytes_ == 0) return;
        bytes_held_ += unpublished_bytes_;
        budget_->bytes.fetch_add(unpublished_bytes_, std::memory_order_relaxed);
        unpublished_bytes_ = 0;
    }

    void record_longest(int32_t blocked) {
        if (recorded_ && calls_.size() <= longest_.size()) return;
        recorded_ = true;
        longest_.clear();
        for (const Frame& f : calls_) longest_.push_back(f.entry->id);
        blocked_ = blocked;
    }

    Model model_;
    std::vector<Op> ops_;
    std::vector<Entry> nodes_;
    Entry head_;
    Entry* entry_ = nullptr;
    State state_{};
    Bitset linearized_;
    TagIndex cache_;
    std::vector<CacheEntry> nodes_cache_;
    std::vector<uint64_t> words_;
    std::vector<Frame> calls_;
    Budget* budget_;
    bool partial_;
    Status status_ = Status::Running;
    uint64_t iterations_ = 0;
    size_t cache_entries_ = 0;
    int64_t bytes_held_ = 0;
    int64_t unpublished_bytes_ = 0;
    std::vector<int32_t> longest_;
    int32_t blocked_ = -1;
    bool recorded_ = false;
};

}  // namespace lin
