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
#include <utility>
#include <vector>

#include "tables.hpp"

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

// Zobrist keys for the members of a set of `bits` operations: the hash of a set is the XOR of
// its members' keys, kept up to date by set and clear.
inline std::vector<uint64_t> zobrist_keys(size_t bits) {
    std::vector<uint64_t> keys(bits);
    for (size_t i = 0; i < bits; ++i) keys[i] = mix64(0x9e3779b97f4a7c15ULL * (i + 1));
    return keys;
}

// The set of linearized operations of a partition of at most 128: two words, stored in the
// cache as they are.
class SmallSet {
public:
    static constexpr size_t MAX = 128;
    struct Stored {
        uint64_t w[2];
    };

    explicit SmallSet(size_t bits) : keys_(zobrist_keys(bits)) {}

    void set(size_t i) {
        w_[i / 64] |= uint64_t(1) << (i % 64);
        hash_ ^= keys_[i];
    }
    void clear(size_t i) {
        w_[i / 64] &= ~(uint64_t(1) << (i % 64));
        hash_ ^= keys_[i];
    }
    uint64_t hash() const { return hash_; }
    bool same(const Stored& s) const { return s.w[0] == w_[0] && s.w[1] == w_[1]; }
    Stored store() { return Stored{{w_[0], w_[1]}}; }
    size_t stored_bytes() const { return 0; }   // beyond sizeof(Stored)

private:
    uint64_t w_[2] = {0, 0};
    std::vector<uint64_t> keys_;
    uint64_t hash_ = 0;
};

// The set of linearized operations of any size. Besides the words it keeps `lead` (how many
// leading words are all ones) and `top` (one past the last non-zero word), so the cache can
// store only the words between them: in a history that linearizes roughly in time order that
// is a handful of words however long the history is. Up to two are stored in the cache entry,
// more in an arena the set keeps.
class Bitset {
public:
    struct Stored {
        uint32_t lead;    // leading all-ones words
        uint32_t words;   // how many middle words
        uint64_t inl[2];  // the middle words, or inl[0]: where they start in the arena
    };

    explicit Bitset(size_t bits) : words_((bits + 63) / 64, 0), keys_(zobrist_keys(bits)) {}

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
    uint64_t hash() const { return hash_; }
    bool same(const Stored& s) const {
        size_t words = middle_size();
        if (s.lead != lead_ || s.words != words) return false;
        const uint64_t* stored = words <= 2 ? s.inl : arena_.data() + s.inl[0];
        const uint64_t* middle = words_.data() + lead_;
        for (size_t w = 0; w < words; ++w) {
            if (stored[w] != middle[w]) return false;
        }
        return true;
    }
    Stored store() {
        size_t words = middle_size();
        const uint64_t* middle = words_.data() + lead_;
        Stored s{uint32_t(lead_), uint32_t(words), {0, 0}};
        if (words <= 2) {
            std::copy(middle, middle + words, s.inl);
        } else {
            s.inl[0] = arena_.size();
            arena_.insert(arena_.end(), middle, middle + words);
        }
        return s;
    }
    size_t stored_bytes() const { return middle_size() > 2 ? middle_size() * 8 : 0; }

private:
    size_t middle_size() const { return std::max(top_, lead_) - lead_; }

    std::vector<uint64_t> words_;
    std::vector<uint64_t> keys_;
    uint64_t hash_ = 0;
    size_t lead_ = 0;
    size_t top_ = 0;
    std::vector<uint64_t> arena_;
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
// One partition's search, whatever its model and set representation.
class SearchBase {
public:
    virtual ~SearchBase() = default;
    // Work for at most `iterations` steps; returns the status afterwards.
    virtual Status run(uint64_t iterations) = 0;
    virtual Status status() const = 0;
    virtual uint64_t iterations() const = 0;
    virtual size_t cache_entries() const = 0;
    virtual const std::vector<int32_t>& longest() const = 0;
    virtual int32_t blocked() const = 0;
};

template <class Model, class Set>
class Search final : public SearchBase {
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

    ~Search() override { budget_->bytes.fetch_sub(bytes_held_); }

    Status status() const override { return status_; }
    uint64_t iterations() const override { return iterations_; }
    size_t cache_entries() const override { return cache_entries_; }
    const std::vector<int32_t>& longest() const override { return longest_; }
    int32_t blocked() const override { return blocked_; }

    Status run(uint64_t iterations) override {
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
    // The cache: entries (the linearized set as the Set stores it, the state) in chunks that
    // never move, chained by bucket (tables.hpp): no allocation per entry.
    struct CacheEntry {
        typename Set::Stored set;
        int32_t next;      // next entry of the bucket, -1 at the end
        uint32_t tag;      // the hash's high half: the bucket, and a quick test before the full one
        State state;
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
        uint64_t h = linearized_.hash() ^ mix64(model_.hash(next));
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
        const uint32_t tag = uint32_t(h >> 32);
        int32_t& head = buckets_.head(tag);
        for (int32_t i = head; i >= 0;) {
            const CacheEntry& c = nodes_cache_[size_t(i)];
            if (c.tag == tag && model_.equal(c.state, state) && linearized_.same(c.set)) return false;
            i = c.next;
        }
        unpublished_bytes_ += int64_t(sizeof(CacheEntry) + linearized_.stored_bytes() + model_.bytes(state) -
                                      sizeof(State) + 8);
        nodes_cache_.push_back(CacheEntry{linearized_.store(), head, tag, state});
        head = int32_t(nodes_cache_.size() - 1);
        buckets_.added(++cache_entries_, [this](size_t i) { return nodes_cache_[i].tag; },
                       [this](size_t i) -> int32_t& { return nodes_cache_[i].next; });
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
    Set linearized_;
    Buckets buckets_;
    Chunked<CacheEntry> nodes_cache_;
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

// The search for a partition: two-word sets when it has at most 128 operations.
template <class Model>
std::unique_ptr<SearchBase> make_search(Model model, std::vector<typename Model::Op> ops,
                                        const std::vector<Timed>& times, Budget* budget, bool partial) {
    if (ops.size() <= SmallSet::MAX) {
        return std::make_unique<Search<Model, SmallSet>>(std::move(model), std::move(ops), times, budget, partial);
    }
    return std::make_unique<Search<Model, Bitset>>(std::move(model), std::move(ops), times, budget, partial);
}

}  // namespace lin
