// The built-in models of the C++ checker. Their Python twins, which define the meaning, live
// in linearizability/models.py; the differential tests hold the two to the same verdicts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "hash_index.hpp"

namespace lin {

constexpr int64_t NIL = std::numeric_limits<int64_t>::min();

// A register with read, write and compare-and-set (porcupine's etcd model). Also the model of
// committed consumer-group offsets: one register per group and partition, commit = write,
// committed = read, nothing committed = NIL.
struct RegisterModel {
    enum Kind : int8_t { Read = 0, Write = 1, Cas = 2 };
    struct Op {
        int8_t kind;
        bool known;     // false: the output is unknown (timed out, or pending)
        int64_t a;      // read: the value read; write: the value; cas: expected
        int64_t b;      // cas: the new value
        bool ok;        // cas: whether it succeeded
    };
    using State = int64_t;

    State init() const { return NIL; }
    bool step(const State& s, const Op& op, State& next) {
        switch (op.kind) {
            case Read:
                next = s;
                return !op.known || op.a == s;
            case Write:
                next = op.a;
                return true;
            default:
                next = s == op.a ? op.b : s;
                return !op.known || (op.ok == (s == op.a));
        }
    }
    bool equal(const State& x, const State& y) const { return x == y; }
    uint64_t hash(const State& s) const { return uint64_t(s); }
    size_t bytes(const State&) const { return sizeof(State); }
    int64_t take_bytes() { return 0; }
    void apply(const Op&) {}
    void undo(const Op&) {}
};

// Strings as ids: every string a kv history can hold is interned once (found again by a
// polynomial hash that concatenation extends in O(1)), and an append's result is memoised, so
// a state is one int (a key) or one int per key (the whole map) and step, equal and hash cost
// O(1) however long the values grow.
class Strings {
public:
    int32_t intern(const std::string& s) {
        uint64_t h = 0;
        for (unsigned char c : s) h = h * BASE + c + 1;
        return add(s, h, power(s.size()));
    }
    int32_t concat(int32_t left, int32_t right) {
        uint64_t k = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
        int32_t* memo = concat_.find(k);
        if (*memo >= 0) return *memo;
        const size_t l = size_t(left), r = size_t(right);
        uint64_t h = hashes_[l] * powers_[r] + hashes_[r];
        int32_t id = add(values_[l] + values_[r], h, powers_[l] * powers_[r]);
        *concat_.find(k) = id;   // find again: add may have grown the table
        return id;
    }
    int64_t take_bytes() { int64_t b = new_bytes_; new_bytes_ = 0; return b; }

private:
    static constexpr uint64_t BASE = 0x100000001b3ULL;

    static uint64_t power(size_t n) {
        uint64_t p = 1;
        for (size_t i = 0; i < n; ++i) p *= BASE;
        return p;
    }
    // The id of s (h its polynomial hash, p = BASE^len): the existing one if s is known.
    int32_t add(std::string s, uint64_t h, uint64_t p) {
        int32_t* head = ids_.find(h);
        for (int32_t i = *head; i >= 0; i = next_[size_t(i)]) {
            if (values_[size_t(i)] == s) return i;
        }
        int32_t id = int32_t(values_.size());
        new_bytes_ += int64_t(s.size() + 64);
        values_.push_back(std::move(s));
        hashes_.push_back(h);
        powers_.push_back(p);
        next_.push_back(*head);
        *head = id;
        return id;
    }

    HashIndex ids_;       // polynomial hash -> chain of ids (next_)
    HashIndex concat_;    // (left, right) -> id of left + right
    std::vector<std::string> values_;
    std::vector<uint64_t> hashes_;
    std::vector<uint64_t> powers_;
    std::vector<int32_t> next_;
    int64_t new_bytes_ = 0;
};

struct KvOp {
    enum Kind : int8_t { Get = 0, Put = 1, Append = 2 };
    int8_t kind;
    bool known;      // get: whether the value read is known
    int32_t key;     // index of the key (kv-map only)
    int32_t value;   // interned string: get's result, put's or append's argument
};

// porcupine's kvModel: one key's string, partitioned by key. Initial value "".
struct KvModel {
    using Op = KvOp;
    using State = int32_t;
    Strings strings;
    int32_t empty;

    KvModel() : empty(strings.intern("")) {}
    State init() const { return empty; }
    bool step(const State& s, const Op& op, State& next) {
        switch (op.kind) {
            case Op::Get:
                next = s;
                return !op.known || op.value == s;
            case Op::Put:
                next = op.value;
                return true;
            default:
                next = strings.concat(s, op.value);
                return true;
        }
    }
    bool equal(const State& x, const State& y) const { return x == y; }
    uint64_t hash(const State& s) const { return uint64_t(s); }
    size_t bytes(const State&) const { return sizeof(State); }
    int64_t take_bytes() { return strings.take_bytes(); }
    void apply(const Op&) {}
    void undo(const Op&) {}
};

// porcupine's kvNoPartitionModel: the whole map as the state.
struct KvMapModel {
    using Op = KvOp;
    using State = std::vector<int32_t>;
    Strings strings;
    size_t keys = 0;
    int32_t empty;

    KvMapModel() : empty(strings.intern("")) {}
    State init() const { return State(keys, empty); }
    bool step(const State& s, const Op& op, State& next) {
        int32_t cur = s[size_t(op.key)];
        switch (op.kind) {
            case Op::Get:
                if (op.known && op.value != cur) return false;
                next = s;
                return true;
            case Op::Put:
                next = s;
                next[size_t(op.key)] = op.value;
                return true;
            default:
                next = s;
                next[size_t(op.key)] = strings.concat(cur, op.value);
                return true;
        }
    }
    bool equal(const State& x, const State& y) const { return x == y; }
    uint64_t hash(const State& s) const {
        uint64_t h = 1469598103934665603ULL;
        for (int32_t v : s) h = (h ^ uint64_t(uint32_t(v))) * 1099511628211ULL;
        return h;
    }
    size_t bytes(const State& s) const { return sizeof(State) + 4 * s.size(); }
    int64_t take_bytes() { return strings.take_bytes(); }
    void apply(const Op&) {}
    void undo(const Op&) {}
};

// A Kafka partition's committed log. append(value) -> offset puts the value at that offset,
// which must be past every offset already in the log; a read returns records (offset, value)
// from a position: each must be in the log with that value, and no record of the log between
// the position and the last record returned may be missing (a read returning nothing says
// nothing is in the log at or after the position). Offsets may have gaps (transaction
// markers, aborted records). An append whose offset is unknown and never read has no effect.
//
// The log is a function of which appends are linearized, so the state is only the end offset;
// the contents live in a table the search keeps in step through apply and undo, with a
// Fenwick tree counting the records in a range of offsets.
struct LogModel {
    enum Kind : int8_t { Append = 0, Read = 1, Noop = 2 };
    struct Op {
        int8_t kind;
        int32_t slot;               // append: index of its offset in the offset universe
        int32_t from_slot;          // read: first slot at or after the read's position
        int64_t offset;             // append: its offset
        int64_t value;              // append: its value
        std::vector<int64_t> recs;  // read: slot, value, slot, value, ...
        int32_t last_slot;          // read: slot of the last record; -1 for an empty read
    };
    struct State {
        int64_t end;
        bool operator==(const State& o) const { return end == o.end; }
    };

    std::vector<int64_t> value;     // per slot
    std::vector<uint8_t> present;
    std::vector<int32_t> tree;      // Fenwick tree over slots

    void resize(size_t slots) {
        value.assign(slots, 0);
        present.assign(slots, 0);
        tree.assign(slots + 1, 0);
    }
    void add(int32_t slot, int32_t delta) {
        for (size_t i = size_t(slot) + 1; i < tree.size(); i += i & (~i + 1)) tree[i] += delta;
    }
    int32_t prefix(int32_t slot) const {   // records in slots [0, slot)
        int32_t sum = 0;
        for (size_t i = size_t(slot); i > 0; i -= i & (~i + 1)) sum += tree[i];
        return sum;
    }

    State init() const { return State{NIL}; }
    bool step(const State& s, const Op& op, State& next) {
        next = s;
        switch (op.kind) {
            case Append:
                if (present[size_t(op.slot)] || (s.end != NIL && op.offset < s.end)) return false;
                next.end = op.offset + 1;
                return true;
            case Read: {
                size_t n = op.recs.size() / 2;
                for (size_t i = 0; i < n; ++i) {
                    size_t slot = size_t(op.recs[2 * i]);
                    if (!present[slot] || value[slot] != op.recs[2 * i + 1]) return false;
                }
                int32_t hi = op.last_slot < 0 ? int32_t(present.size()) : op.last_slot + 1;
                return prefix(hi) - prefix(op.from_slot) == int32_t(n);
            }
            default:
                return true;
        }
    }
    bool equal(const State& x, const State& y) const { return x == y; }
    uint64_t hash(const State& s) const { return uint64_t(s.end); }
    size_t bytes(const State&) const { return sizeof(State); }
    int64_t take_bytes() { return 0; }
    void apply(const Op& op) {
        if (op.kind != Append) return;
        present[size_t(op.slot)] = 1;
        value[size_t(op.slot)] = op.value;
        add(op.slot, 1);
    }
    void undo(const Op& op) {
        if (op.kind != Append) return;
        present[size_t(op.slot)] = 0;
        add(op.slot, -1);
    }
};

}  // namespace lin
