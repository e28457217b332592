// The built-in models of the C++ checker. Their Python twins, which define the meaning, live
// in linearizability/models.py; the differential tests hold the two to the same verdicts.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tables.hpp"

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

// Strings as ids: every string a kv history can hold is interned once, so a state is one int
// (a key) or one int per key (the whole map) and step, equal and hash cost O(1) however long
// the values grow. A string read or written by the history is kept as text; an append's
// result only as the pair of ids it joins (its text is never built), with its length and a
// polynomial hash that concatenation extends in O(1). Two ids are the same string exactly when
// their texts are equal: an append finds its result among the known strings of equal hash and
// length by the pair it joins, else compares texts in full (assembled from the pairs), which
// only a different split of the same text or a hash collision needs.
class Strings {
public:
    int32_t intern(const std::string& s) {
        uint64_t h = 0;
        for (unsigned char c : s) h = h * BASE + c + 1;
        uint64_t p = 1;
        for (size_t i = 0; i < s.size(); ++i) p *= BASE;
        for (int32_t i = ids_.head(tag(h)); i >= 0; i = nodes_[size_t(i)].next) {
            if (nodes_[size_t(i)].hash == h && nodes_[size_t(i)].len == s.size() && text(i) == s) return i;
        }
        texts_.push_back(s);
        new_bytes_ += int64_t(s.size() + 32);
        return add(Node{h, p, s.size(), -1, int32_t(texts_.size() - 1), -1});
    }
    int32_t concat(int32_t left, int32_t right) {
        uint64_t k = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
        auto& recent = recent_.slot(k * 0x9e3779b97f4a7c15ULL);
        if (recent.key == k && recent.value >= 0) return recent.value;
        const Node& l = nodes_[size_t(left)];
        const Node& r = nodes_[size_t(right)];
        Node n{l.hash * r.power + r.hash, l.power * r.power, l.len + r.len, left, right, -1};
        int32_t id = -1;
        std::string mine;   // this string's text, assembled only if a candidate needs it
        for (int32_t i = ids_.head(tag(n.hash)); i >= 0 && id < 0; i = nodes_[size_t(i)].next) {
            const Node& c = nodes_[size_t(i)];
            if (c.hash != n.hash || c.len != n.len) continue;
            if (c.left == left && c.right == right) {
                id = i;
                break;
            }
            if (mine.empty()) mine = text(left) + text(right);
            if (text(i) == mine) id = i;
        }
        if (id < 0) id = add(n);
        recent = {k, id};
        return id;
    }
    // The text of an id (assembled from its pairs; only for comparisons and messages).
    std::string text(int32_t id) const {
        std::string out;
        std::vector<int32_t> todo{id};
        while (!todo.empty()) {
            const Node& n = nodes_[size_t(todo.back())];
            todo.pop_back();
            if (n.left < 0) {
                out += texts_[size_t(n.right)];
            } else {
                todo.push_back(n.right);
                todo.push_back(n.left);
            }
        }
        return out;
    }
    int64_t take_bytes() { int64_t b = new_bytes_; new_bytes_ = 0; return b; }

private:
    static constexpr uint64_t BASE = 0x100000001b3ULL;

    struct Node {
        uint64_t hash;    // polynomial hash of the text
        uint64_t power;   // BASE ^ length
        uint64_t len;
        int32_t left;     // -1: a text of texts_[right]; else the pair left + right
        int32_t right;
        int32_t next;     // next id of its bucket of ids_
    };

    static uint32_t tag(uint64_t hash) { return uint32_t(mix64(hash) >> 32); }
    int32_t add(Node n) {
        int32_t& head = ids_.head(tag(n.hash));
        n.next = head;
        nodes_.push_back(n);
        head = int32_t(nodes_.size() - 1);
        ids_.added(nodes_.size(), [this](size_t i) { return tag(nodes_[i].hash); },
                   [this](size_t i) -> int32_t& { return nodes_[i].next; });
        new_bytes_ += int64_t(sizeof(Node) + 8);
        return int32_t(nodes_.size() - 1);
    }

    Recent<uint64_t, 10> recent_;   // the last appends, by (left, right)
    Buckets ids_;         // chains of ids by hash
    Chunked<Node> nodes_;
    std::vector<std::string> texts_;
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

// porcupine's kvNoPartitionModel: the whole map as the state. Every map the search reaches is
// interned once (its values, one string id per key, in one arena), so a state is an int:
// equal and hash are O(1) and the cache stores four bytes per state. A step finds the map it
// leads to by an incremental hash (XOR of one term per key, so changing a key changes two
// terms) and compares the candidates with the one changed key in mind, without copying.
struct KvMapModel {
    using Op = KvOp;
    using State = int32_t;
    Strings strings;
    size_t keys = 0;
    int32_t empty;

    KvMapModel() : empty(strings.intern("")) {}
    State init() {
        std::vector<int32_t> values(keys, empty);
        uint64_t h = 0;
        for (size_t k = 0; k < keys; ++k) h ^= term(k, empty);
        return add(values.data(), h);
    }
    bool step(const State& s, const Op& op, State& next) {
        const size_t k = size_t(op.key);
        int32_t cur = value(s, k);
        switch (op.kind) {
            case Op::Get:
                next = s;
                return !op.known || op.value == cur;
            case Op::Put:
                next = with(s, k, op.value);
                return true;
            default:
                next = with(s, k, strings.concat(cur, op.value));
                return true;
        }
    }
    bool equal(const State& x, const State& y) const { return x == y; }
    uint64_t hash(const State& s) const { return hashes_[size_t(s)]; }
    size_t bytes(const State&) const { return sizeof(State); }
    int64_t take_bytes() { int64_t b = new_bytes_ + strings.take_bytes(); new_bytes_ = 0; return b; }
    void apply(const Op&) {}
    void undo(const Op&) {}

private:
    int32_t value(State s, size_t k) const { return values_[size_t(s) * keys + k]; }
    static uint64_t term(size_t k, int32_t v) { return mix64((uint64_t(k) << 32 | uint32_t(v)) + 0x9e3779b97f4a7c15ULL); }
    // The id of s's map with key k set to v.
    State with(State s, size_t k, int32_t v) {
        int32_t old = value(s, k);
        if (old == v) return s;
        const std::array<int32_t, 3> key{s, int32_t(k), v};
        auto& recent = recent_.slot(mix64(uint64_t(uint32_t(s)) << 32 ^ uint64_t(k) << 20 ^ uint32_t(v)));
        if (recent.key == key && recent.value >= 0) return recent.value;
        State to = find_with(s, k, v, old);
        recent = {key, to};
        return to;
    }
    State find_with(State s, size_t k, int32_t v, int32_t old) {
        uint64_t h = hashes_[size_t(s)] ^ term(k, old) ^ term(k, v);
        for (int32_t i = index_.head(uint32_t(h >> 32)); i >= 0; i = next_[size_t(i)]) {
            if (hashes_[size_t(i)] != h) continue;
            const int32_t* a = &values_[size_t(i) * keys];
            const int32_t* b = &values_[size_t(s) * keys];
            bool same = a[k] == v;
            for (size_t j = 0; same && j < keys; ++j) same = j == k || a[j] == b[j];
            if (same) return i;
        }
        // A new map: s's values with k changed (copied first: values_ may reallocate).
        std::vector<int32_t> values(values_.begin() + std::ptrdiff_t(size_t(s) * keys),
                                    values_.begin() + std::ptrdiff_t(size_t(s) * keys + keys));
        values[k] = v;
        return add(values.data(), h);
    }
    // The id of a map not yet known.
    State add(const int32_t* values, uint64_t h) {
        int32_t id = int32_t(hashes_.size());
        int32_t& head = index_.head(uint32_t(h >> 32));
        values_.insert(values_.end(), values, values + keys);
        hashes_.push_back(h);
        next_.push_back(head);
        head = id;
        index_.added(hashes_.size(), [this](size_t i) { return uint32_t(hashes_[i] >> 32); },
                     [this](size_t i) -> int32_t& { return next_[i]; });
        new_bytes_ += int64_t(keys * sizeof(int32_t) + 24);
        return id;
    }

    Recent<std::array<int32_t, 3>, 12> recent_;   // the last steps: (map, key, value) -> map
    std::vector<int32_t> values_;   // keys values per interned map
    std::vector<uint64_t> hashes_;
    std::vector<int32_t> next_;     // next id of its bucket of index_
    Buckets index_;                 // chains of ids by hash
    int64_t new_bytes_ = 0;
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
