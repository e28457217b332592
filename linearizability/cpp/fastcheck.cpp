// properties._fastcheck: the history checker's hot path in C++ (properties/checker.py, engine "fast").
//
// It reads a history.jsonl (or the same text handed over in memory), keeps only what the checks
// need in flat arrays, and runs the checks of properties/jepsen_checks.py and properties/cycles.py
// the way the Python code runs them, in the same order, so that the verdict is the same one:
// the Python checker is the oracle, and tests compare the two on every history they use.
//
// It covers a subset, and says "fallback: why" for anything outside it, where the caller runs the
// Python checker instead (so that verdicts and error messages stay the Python ones):
//  * a line it does not read exactly as Python's json and traces/history.py would (anything not
//    ASCII, a carriage return, a float or a huge integer where an integer is needed, a string
//    escape \u, a duplicate object key, a value that is not an integer (tombstones, names), a
//    rebalance log, an invalid op or sequence: Python then names the problem);
//  * a run configuration whose checks it does not have (compaction, exactly-once, --lin): the
//    caller (properties/checker.py, check_fast) decides that beforehand.
// Every other check it runs itself, with the Python checker's evidence word for word: the version
// orders, the Jepsen-parity checks (duplicate, lost-write, G1a, skips and reversals, G1b,
// stale-read), the cycle searches (G0, G1c and variants, G-single, G2), nonatomic-read, the final
// read's, idempotence-error, empty-history and stalled; a consumer-group run's group checks run
// in Python beside it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <tuple>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

struct Fallback {
    std::string why;
};

[[noreturn]] void fallback(const std::string& why) { throw Fallback{why}; }

// ------------------------------------------------------------------ JSON (one line)

enum JT : uint8_t { J_NULL, J_FALSE, J_TRUE, J_INT, J_NUM, J_STR, J_ARR, J_OBJ };

struct JNode {
    JT t;
    int64_t i;   // J_INT
    uint32_t a;  // J_STR: offset in sb; J_ARR/J_OBJ: offset in kids
    uint32_t n;  // J_STR: length; J_ARR: items; J_OBJ: pairs (kids hold key, value, ...)
};

struct Json {
    const char* p = nullptr;
    const char* e = nullptr;
    std::vector<JNode> nodes;
    std::vector<uint32_t> kids;
    std::vector<uint32_t> tmp;
    std::string sb;
    int depth = 0;

    uint32_t parse(const char* b, const char* end) {
        p = b;
        e = end;
        nodes.clear();
        kids.clear();
        tmp.clear();
        sb.clear();
        depth = 0;
        ws();
        uint32_t root = value();
        ws();
        if (p != e) fallback("json: extra data");
        return root;
    }
    void ws() {
        while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
    }
    uint32_t add(JT t, int64_t i = 0, uint32_t a = 0, uint32_t n = 0) {
        nodes.push_back(JNode{t, i, a, n});
        return static_cast<uint32_t>(nodes.size() - 1);
    }
    bool lit(const char* s) {
        size_t n = std::strlen(s);
        if (static_cast<size_t>(e - p) >= n && std::memcmp(p, s, n) == 0) {
            p += n;
            return true;
        }
        return false;
    }
    uint32_t value() {
        if (p >= e) fallback("json: unexpected end");
        char c = *p;
        if (c == '{') return object();
        if (c == '[') return array();
        if (c == '"') {
            uint32_t a = static_cast<uint32_t>(sb.size());
            str();
            return add(J_STR, 0, a, static_cast<uint32_t>(sb.size() - a));
        }
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        if (lit("null")) return add(J_NULL);
        if (lit("true")) return add(J_TRUE);
        if (lit("false")) return add(J_FALSE);
        fallback("json: unexpected character");
    }
    void str() {
        ++p;  // "
        while (true) {
            if (p >= e) fallback("json: unterminated string");
            unsigned char c = static_cast<unsigned char>(*p++);
            if (c == '"') return;
            if (c < 0x20) fallback("json: control character in a string");
            if (c == '\\') {
                if (p >= e) fallback("json: bad escape");
                char x = *p++;
                switch (x) {
                    case '"': sb.push_back('"'); break;
                    case '\\': sb.push_back('\\'); break;
                    case '/': sb.push_back('/'); break;
                    case 'b': sb.push_back('\b'); break;
                    case 'f': sb.push_back('\f'); break;
                    case 'n': sb.push_back('\n'); break;
                    case 'r': sb.push_back('\r'); break;
                    case 't': sb.push_back('\t'); break;
                    default: fallback("json: escape not handled here");
                }
                continue;
            }
            sb.push_back(static_cast<char>(c));
        }
    }
    uint32_t number() {
        const char* s = p;
        bool neg = false;
        if (*p == '-') {
            neg = true;
            ++p;
        }
        if (p >= e || !(*p >= '0' && *p <= '9')) fallback("json: bad number");
        const char* ds = p;
        if (*p == '0') {
            ++p;
        } else {
            while (p < e && *p >= '0' && *p <= '9') ++p;
        }
        const char* de = p;
        bool frac = false;
        if (p < e && *p == '.') {
            ++p;
            if (p >= e || !(*p >= '0' && *p <= '9')) fallback("json: bad number");
            while (p < e && *p >= '0' && *p <= '9') ++p;
            frac = true;
        }
        if (p < e && (*p == 'e' || *p == 'E')) {
            ++p;
            if (p < e && (*p == '+' || *p == '-')) ++p;
            if (p >= e || !(*p >= '0' && *p <= '9')) fallback("json: bad number");
            while (p < e && *p >= '0' && *p <= '9') ++p;
            frac = true;
        }
        (void)s;
        // Python's int() refuses a literal of more than sys.get_int_max_str_digits() digits (4300
        // by default, 640 at the least): the line is then an error there, so Python must judge it
        if (!frac && de - ds > 640) fallback("json: an integer of more than 640 digits");
        if (frac || de - ds > 19) return add(J_NUM);  // a float, or an integer int64 cannot hold
        uint64_t v = 0;
        for (const char* q = ds; q < de; ++q) v = v * 10 + static_cast<uint64_t>(*q - '0');  // < 10^19 < 2^64
        if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return add(J_NUM);
        return add(J_INT, neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v));
    }
    uint32_t array() {
        ++p;
        if (++depth > 200) fallback("json: nested too deeply for the fast path");
        size_t base = tmp.size();
        ws();
        if (p < e && *p == ']') {
            ++p;
        } else {
            while (true) {
                ws();
                uint32_t v = value();
                tmp.push_back(v);
                ws();
                if (p < e && *p == ',') {
                    ++p;
                    continue;
                }
                if (p < e && *p == ']') {
                    ++p;
                    break;
                }
                fallback("json: bad array");
            }
        }
        --depth;
        uint32_t a = static_cast<uint32_t>(kids.size());
        uint32_t n = static_cast<uint32_t>(tmp.size() - base);
        kids.insert(kids.end(), tmp.begin() + static_cast<long>(base), tmp.end());
        tmp.resize(base);
        return add(J_ARR, 0, a, n);
    }
    uint32_t object() {
        ++p;
        if (++depth > 200) fallback("json: nested too deeply for the fast path");
        size_t base = tmp.size();
        ws();
        if (p < e && *p == '}') {
            ++p;
        } else {
            while (true) {
                ws();
                if (p >= e || *p != '"') fallback("json: bad object key");
                uint32_t a = static_cast<uint32_t>(sb.size());
                str();
                uint32_t k = add(J_STR, 0, a, static_cast<uint32_t>(sb.size() - a));
                ws();
                if (p >= e || *p != ':') fallback("json: bad object");
                ++p;
                ws();
                uint32_t v = value();
                tmp.push_back(k);
                tmp.push_back(v);
                ws();
                if (p < e && *p == ',') {
                    ++p;
                    continue;
                }
                if (p < e && *p == '}') {
                    ++p;
                    break;
                }
                fallback("json: bad object");
            }
        }
        --depth;
        uint32_t a = static_cast<uint32_t>(kids.size());
        uint32_t n = static_cast<uint32_t>((tmp.size() - base) / 2);
        kids.insert(kids.end(), tmp.begin() + static_cast<long>(base), tmp.end());
        tmp.resize(base);
        return add(J_OBJ, 0, a, n);
    }
    // helpers
    const JNode& at(uint32_t i) const { return nodes[i]; }
    std::string_view s(uint32_t i) const { return std::string_view(sb.data() + nodes[i].a, nodes[i].n); }
    uint32_t kid(uint32_t node, uint32_t j) const { return kids[nodes[node].a + j]; }
    bool truthy(uint32_t i) const {
        const JNode& n = nodes[i];
        switch (n.t) {
            case J_NULL: case J_FALSE: return false;
            case J_TRUE: return true;
            case J_INT: return n.i != 0;
            case J_NUM: fallback("a float where a flag is read");
            case J_STR: case J_ARR: case J_OBJ: return n.n != 0;
        }
        return false;
    }
    // the object's pairs, keys checked unique (Python keeps the last of a repeated key)
    void unique_keys(uint32_t obj) const {
        const JNode& o = nodes[obj];
        if (o.n > 16) {
            std::vector<std::string_view> ks;
            for (uint32_t j = 0; j < o.n; ++j) ks.push_back(s(kids[o.a + 2 * j]));
            std::sort(ks.begin(), ks.end());
            if (std::adjacent_find(ks.begin(), ks.end()) != ks.end()) fallback("json: a repeated object key");
            return;
        }
        for (uint32_t j = 0; j < o.n; ++j)
            for (uint32_t k = j + 1; k < o.n; ++k)
                if (s(kids[o.a + 2 * j]) == s(kids[o.a + 2 * k])) fallback("json: a repeated object key");
    }
};

// ------------------------------------------------------------------ compiled ops

enum Type : uint8_t { T_INVOKE, T_OK, T_FAIL, T_INFO };
enum F : uint8_t { F_SEND, F_POLL, F_TXN, F_ASSIGN, F_SUBSCRIBE, F_COMMIT, F_CRASH, F_COMMITTED, F_OTHER };

inline bool txn_f(uint8_t f) { return f == F_SEND || f == F_POLL || f == F_TXN; }

struct Send {
    int32_t key;
    bool has_off;
    int64_t off;
    int64_t v;
};
struct PollKey {
    int32_t mop;  // which poll micro-op of the op
    int32_t key;
    uint32_t rb, re;  // records [rb, re)
};
struct Rec {
    int64_t off;
    int64_t v;
};

// one line, parsed
struct Line {
    int64_t index = 0, time = 0, process = 0;
    bool nemesis = false;
    uint8_t type = 0, f = 0;
    std::string nemesis_f;
    std::vector<Send> sends;
    std::vector<PollKey> polls;
    std::vector<Rec> recs;
    std::vector<int32_t> keys;
    uint32_t npoll = 0;  // poll micro-ops with a result (Python's len(op.polls))
    bool seek = false;
    uint8_t error = 0;  // its "error": 0 none, 1 a string, 2 a string naming an idempotence error, 3 other
    std::string error_s;
    std::vector<int32_t> touched;  // the keys its rebalance log names
};

struct Op {
    int64_t index, process, invoke_time, time;
    uint8_t type, f;
    bool completed, seek, weak;
    uint8_t error;
    uint32_t tb, te;  // the keys its completion's rebalance log touched, in `touched`
    int32_t error_id;  // in errors, when error is 1 or 2
    uint32_t npoll;
    uint32_t sb, se, pb, pe, kb, ke;
};

// open-addressing map int64 -> int32 slot (INT64_MIN is the empty mark)
struct I64Index {
    std::vector<int64_t> keys;
    std::vector<int32_t> vals;
    size_t used = 0;
    static constexpr int64_t EMPTY = std::numeric_limits<int64_t>::min();
    static size_t h(int64_t k) {
        uint64_t x = static_cast<uint64_t>(k);
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 33;
        return static_cast<size_t>(x);
    }
    void grow() {
        size_t cap = keys.empty() ? 16 : keys.size() * 2;
        std::vector<int64_t> ok(cap, EMPTY);
        std::vector<int32_t> ov(cap, -1);
        ok.swap(keys);
        ov.swap(vals);
        used = 0;
        for (size_t i = 0; i < ok.size(); ++i)
            if (ok[i] != EMPTY) put(ok[i], ov[i]);
    }
    int32_t get(int64_t k) const {
        if (keys.empty()) return -1;
        size_t m = keys.size() - 1;
        for (size_t i = h(k) & m;; i = (i + 1) & m) {
            if (keys[i] == k) return vals[i];
            if (keys[i] == EMPTY) return -1;
        }
    }
    // the slot's value, inserted as `fresh` when new; returns a reference
    int32_t& slot(int64_t k, int32_t fresh) {
        if (k == EMPTY) fallback("a value the fast path cannot index");
        if ((used + 1) * 2 > keys.size()) grow();
        size_t m = keys.size() - 1;
        for (size_t i = h(k) & m;; i = (i + 1) & m) {
            if (keys[i] == k) return vals[i];
            if (keys[i] == EMPTY) {
                keys[i] = k;
                vals[i] = fresh;
                ++used;
                return vals[i];
            }
        }
    }
    void put(int64_t k, int32_t v) { slot(k, v) = v; }
};

// what is known of one value of one key
struct ValInfo {
    int32_t writer = -1;  // position in ops of its (last) writer
    int32_t first = -1, last = -1;  // dense indices in the version order
    int32_t node = -1;  // writer_id of the cycle graph
    bool ok_read = false, failed = false, lost = false;
};

struct KeyState {
    std::string name;
    I64Index index;  // value -> position in info
    std::vector<ValInfo> info;
    std::vector<int64_t> vals;  // the value of each info
    bool logged = false;  // in `logs` (so in a.orders)
    bool ok_reads = false;  // in a.ok_reads
    bool failed = false;  // in a.failed_writes
    std::vector<std::pair<int64_t, int64_t>> log;  // (offset, value) as seen, deduplicated below
    std::vector<int64_t> by_index;  // dense index -> first value at that offset
    std::vector<int64_t> offsets;  // dense index -> offset
    std::vector<uint32_t> off_start;  // dense index -> start of its values in off_vals
    std::vector<int64_t> off_vals;
    ValInfo* find(int64_t v) {
        int32_t i = index.get(v);
        return i < 0 ? nullptr : &info[static_cast<size_t>(i)];
    }
    ValInfo& get(int64_t v) {
        int32_t& i = index.slot(v, static_cast<int32_t>(info.size()));
        if (static_cast<size_t>(i) == info.size()) {
            info.emplace_back();
            vals.push_back(v);
        }
        return info[static_cast<size_t>(i)];
    }
};

// properties/config_checks.py's IDEMPOTENCE_ERRORS
const char* const IDEMPOTENCE_ERRORS[] = {"OUT_OF_ORDER_SEQUENCE_NUMBER", "OutOfOrderSequence", "INVALID_PRODUCER_EPOCH",
                                          "InvalidProducerEpoch", "PRODUCER_FENCED", "ProducerFenced"};

constexpr int WW = 1, WR = 2, RW = 4, PROC = 8, RT = 16;
const char* type_name(int t) {
    switch (t) {
        case WW: return "ww";
        case WR: return "wr";
        case RW: return "rw";
        case PROC: return "process";
        default: return "realtime";
    }
}
constexpr int SHOWN = 50, TRIES = 20, MAX_REPORTED = 50;

struct Budget {
    int64_t steps, used = 0, next_clock = 0;
    std::chrono::steady_clock::time_point deadline;
    int reason = 0;  // 0 none, 1 steps, 2 time
    bool spend(int64_t n = 1) {
        used += n;
        if (reason == 0) {
            if (used > steps) {
                reason = 1;
            } else if (used >= next_clock) {
                next_clock = used + 4096;
                if (std::chrono::steady_clock::now() > deadline) reason = 2;
            }
        }
        return reason != 0;
    }
    bool out() const { return reason != 0; }
};

struct Reported {
    int64_t count = 0;
    py::list items;
};

struct Checker {
    // input
    bool ww_deps = true, staleness = true, weak_acks = false, precommitted_allowed = false;
    // the final read (config.final_read, performed): its start, whether it reached the end, the keys
    // it read to their end
    bool final_read = false, final_reached_end = false;
    int64_t final_start = 0;
    std::vector<std::string> final_ends;
    std::vector<std::string> final_end_values;  // str() of each end offset
    std::string final_bound;  // str() of the final read's staleness bound
    // the idempotence check applies (and acks are not weak, elections not unclean); the faults
    // under which it is not judged
    bool idempotence = false;
    std::vector<std::string> tcp_breaking;
    int64_t staleness_bound_ms = 30000;
    Budget budget;

    // compiled
    std::vector<Op> ops;
    std::vector<Send> sends;
    std::vector<PollKey> pkeys;
    std::vector<Rec> recs;
    std::vector<int32_t> akeys;
    std::vector<int32_t> touched;
    std::vector<std::string> errors;
    std::vector<KeyState> keys;
    std::unordered_map<std::string, int32_t> key_ids;
    std::vector<int32_t> key_order;  // keys in the order logs (a.orders) first touched them
    std::vector<std::pair<int64_t, int64_t>> nemesis;
    std::vector<std::string> nemesis_fs;
    int64_t n_lines = 0;
    std::vector<char> committed;  // by op position

    // reports (cycles only)
    std::vector<std::pair<std::pair<std::string, bool>, Reported>> reports;
    int64_t unread = 0;
    py::dict cycle_stats;

    const std::string& kname(int32_t key) const { return keys[static_cast<size_t>(key)].name; }

    Reported& reported(const std::string& kind, bool allowed) {
        for (auto& r : reports)
            if (r.first.first == kind && r.first.second == allowed) return r.second;
        reports.emplace_back(std::make_pair(kind, allowed), Reported());
        return reports.back().second;
    }

    // Result.add: counted always, its evidence (made by `make`) kept for the first MAX_REPORTED
    template <class Make>
    void add(const std::string& kind, bool allowed, Make make) {
        Reported& r = reported(kind, allowed);
        ++r.count;
        if (static_cast<int64_t>(py::len(r.items)) < MAX_REPORTED) r.items.append(make());
    }

    static std::vector<int64_t> head(const std::vector<int64_t>& v, size_t n) {
        return std::vector<int64_t>(v.begin(), v.begin() + static_cast<long>(std::min(n, v.size())));
    }

    // Python's f"{x:.1f}"
    static std::string fmt1(double x) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.1f", x);
        return buf;
    }

    // Python's repr of a list of integers
    static std::string repr(const std::vector<int64_t>& v) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            out += std::to_string(v[i]);
        }
        return out + "]";
    }

    int64_t signal_tick = 0;
    void poll_signals() {
        if (++signal_tick % 65536 == 0 && PyErr_CheckSignals() != 0) throw py::error_already_set();
    }

    int32_t key_id(std::string_view name) {
        std::string k(name);
        auto it = key_ids.find(k);
        if (it != key_ids.end()) return it->second;
        int32_t id = static_cast<int32_t>(keys.size());
        keys.emplace_back();
        keys.back().name = k;
        key_ids.emplace(std::move(k), id);
        return id;
    }
    int32_t key_of(const Json& j, uint32_t node) {
        const JNode& n = j.at(node);
        if (n.t == J_STR) return key_id(j.s(node));
        if (n.t == J_INT) return key_id(std::to_string(n.i));
        fallback("a key that is not a string or an integer");
    }

    // ---------------------------------------------------------------- reading

    void parse_mops(const Json& j, uint32_t value, Line& L) {
        const JNode& arr = j.at(value);
        if (arr.t != J_ARR) fallback("the value of a send, poll or txn op is not a list");
        int32_t mop_no = 0;
        for (uint32_t m = 0; m < arr.n; ++m) {
            uint32_t mop = j.kid(value, m);
            const JNode& mn = j.at(mop);
            if (mn.t != J_ARR || mn.n == 0 || j.at(j.kid(mop, 0)).t != J_STR) fallback("a bad micro-op");
            std::string_view head = j.s(j.kid(mop, 0));
            if (head == "send") {
                if (mn.n != 3 && mn.n != 4) fallback("a bad send micro-op");
                int32_t key = key_of(j, j.kid(mop, 1));
                uint32_t v = j.kid(mop, 2);
                const JNode& vn = j.at(v);
                if (vn.t == J_ARR && vn.n == 2) {
                    const JNode& o = j.at(j.kid(v, 0));
                    const JNode& x = j.at(j.kid(v, 1));
                    if (x.t != J_INT) fallback("a sent value that is not an integer");
                    if (o.t == J_INT) {
                        L.sends.push_back(Send{key, true, o.i, x.i});
                    } else if (o.t == J_NULL) {
                        L.sends.push_back(Send{key, false, 0, x.i});
                    } else {
                        fallback("a bad offset");
                    }
                } else if (vn.t == J_INT) {
                    L.sends.push_back(Send{key, false, 0, vn.i});
                } else {
                    fallback("a sent value that is not an integer");
                }
                if (mn.n == 4) {
                    JT rk = j.at(j.kid(mop, 3)).t;
                    if (rk != J_NULL && rk != J_STR && rk != J_INT) fallback("a bad record key");
                }
            } else if (head == "poll") {
                if (mn.n > 2) fallback("a bad poll micro-op");
                if (mn.n == 1) continue;
                uint32_t obj = j.kid(mop, 1);
                const JNode& on = j.at(obj);
                if (on.t != J_OBJ) fallback("a bad poll micro-op");
                j.unique_keys(obj);
                for (uint32_t q = 0; q < on.n; ++q) {
                    int32_t key = key_id(j.s(j.kid(obj, 2 * q)));
                    uint32_t records = j.kid(obj, 2 * q + 1);
                    const JNode& rn = j.at(records);
                    if (rn.t != J_ARR) fallback("bad polled records");
                    PollKey pk{mop_no, key, static_cast<uint32_t>(L.recs.size()), 0};
                    for (uint32_t r = 0; r < rn.n; ++r) {
                        uint32_t rec = j.kid(records, r);
                        const JNode& recn = j.at(rec);
                        if (recn.t != J_ARR || (recn.n != 2 && recn.n != 3)) fallback("a bad polled record");
                        const JNode& o = j.at(j.kid(rec, 0));
                        const JNode& x = j.at(j.kid(rec, 1));
                        if (o.t != J_INT || x.t != J_INT) fallback("a polled record that is not [offset, integer]");
                        if (recn.n == 3) {
                            JT rk = j.at(j.kid(rec, 2)).t;
                            if (rk != J_NULL && rk != J_STR && rk != J_INT) fallback("a bad record key");
                        }
                        L.recs.push_back(Rec{o.i, x.i});
                    }
                    pk.re = static_cast<uint32_t>(L.recs.size());
                    L.polls.push_back(pk);
                }
                ++mop_no;
            } else {
                fallback("a micro-op that is neither send nor poll");
            }
        }
        L.npoll = static_cast<uint32_t>(mop_no);
    }

    void parse_line(const Json& j, uint32_t root, Line& L) {
        const JNode& o = j.at(root);
        if (o.t != J_OBJ) fallback("a line that is not an object");
        j.unique_keys(root);
        int have = 0;
        uint32_t value = UINT32_MAX;
        L.sends.clear();
        L.polls.clear();
        L.recs.clear();
        L.keys.clear();
        L.seek = false;
        L.nemesis = false;
        L.npoll = 0;
        L.error = 0;
        L.touched.clear();
        for (uint32_t q = 0; q < o.n; ++q) {
            std::string_view k = j.s(j.kid(root, 2 * q));
            uint32_t v = j.kid(root, 2 * q + 1);
            const JNode& vn = j.at(v);
            if (k == "index") {
                if (vn.t != J_INT) fallback("index");
                L.index = vn.i;
                have |= 1;
            } else if (k == "time") {
                if (vn.t != J_INT) fallback("time");
                L.time = vn.i;
                have |= 2;
            } else if (k == "process") {
                if (vn.t == J_INT) {
                    L.process = vn.i;
                } else if (vn.t == J_STR && j.s(v) == "nemesis") {
                    L.nemesis = true;
                } else {
                    fallback("process");
                }
                have |= 4;
            } else if (k == "type") {
                if (vn.t != J_STR) fallback("type");
                std::string_view t = j.s(v);
                if (t == "invoke") L.type = T_INVOKE;
                else if (t == "ok") L.type = T_OK;
                else if (t == "fail") L.type = T_FAIL;
                else if (t == "info") L.type = T_INFO;
                else fallback("type");
                have |= 8;
            } else if (k == "f") {
                if (vn.t != J_STR) fallback("f");
                std::string_view f = j.s(v);
                L.nemesis_f = std::string(f);
                if (f == "send") L.f = F_SEND;
                else if (f == "poll") L.f = F_POLL;
                else if (f == "txn") L.f = F_TXN;
                else if (f == "assign") L.f = F_ASSIGN;
                else if (f == "subscribe") L.f = F_SUBSCRIBE;
                else if (f == "commit") L.f = F_COMMIT;
                else if (f == "crash") L.f = F_CRASH;
                else if (f == "committed") L.f = F_COMMITTED;
                else L.f = F_OTHER;
                have |= 16;
            } else if (k == "value") {
                value = v;
            } else if (k == "seek_to_beginning") {
                L.seek = j.truthy(v);
            } else if (k == "rebalance_log") {
                // frozenset(_key(k) for e in rebalance_log if isinstance(e, dict) for k in e.get("keys") or [])
                if (!j.truthy(v)) continue;
                if (vn.t != J_ARR) fallback("a rebalance log that is not a list");
                for (uint32_t qi = 0; qi < vn.n; ++qi) {
                    uint32_t e = j.kid(v, qi);
                    if (j.at(e).t != J_OBJ) continue;
                    j.unique_keys(e);
                    for (uint32_t m = 0; m < j.at(e).n; ++m) {
                        if (j.s(j.kid(e, 2 * m)) != "keys") continue;
                        uint32_t ks = j.kid(e, 2 * m + 1);
                        if (!j.truthy(ks)) continue;
                        if (j.at(ks).t != J_ARR) fallback("a rebalance log's keys that are not a list");
                        for (uint32_t r = 0; r < j.at(ks).n; ++r) L.touched.push_back(key_of(j, j.kid(ks, r)));
                    }
                }
            } else if (k == "error") {
                if (vn.t == J_STR) {
                    std::string_view e = j.s(v);
                    L.error = e.empty() ? 0 : 1;
                    L.error_s = std::string(e);
                    for (const char* name : IDEMPOTENCE_ERRORS)
                        if (e.find(name) != std::string_view::npos) L.error = 2;
                } else {
                    L.error = j.truthy(v) ? 3 : 0;
                }
            }
        }
        if (have != 31) fallback("a missing field");
        if (L.nemesis) return;
        if (L.f == F_OTHER) fallback("an unknown client function");
        if (txn_f(L.f)) {
            if (value == UINT32_MAX) fallback("no value");
            parse_mops(j, value, L);
        } else if (L.f == F_ASSIGN || L.f == F_SUBSCRIBE) {
            if (value != UINT32_MAX && j.at(value).t == J_ARR) {
                for (uint32_t m = 0; m < j.at(value).n; ++m) {
                    uint32_t kn = j.kid(value, m);
                    JT t = j.at(kn).t;
                    if (t != J_STR && t != J_INT) fallback("an assign of something other than keys");
                    L.keys.push_back(key_of(j, kn));
                }
            }
        } else if (value != UINT32_MAX && j.at(value).t == J_ARR) {
            fallback("a list value of a commit, crash or committed op");
        }
    }

    std::unordered_map<int64_t, Line> open_client;
    bool nemesis_open_seq = false;  // SequenceCheck's open nemesis op
    std::string nemesis_open_f;
    bool nemesis_span_open = false;
    int64_t nemesis_span_start = 0;
    int64_t last_time = 0;

    void fold(const Line* inv, const Line* comp, int64_t end_time) {
        const Line* src = comp ? comp : inv;
        Op op{};
        op.index = src->index;
        op.process = src->process;
        op.type = comp ? comp->type : static_cast<uint8_t>(T_INFO);
        op.f = src->f;
        op.invoke_time = inv ? inv->time : src->time;
        op.time = comp ? comp->time : end_time;
        op.completed = comp != nullptr;
        op.seek = src->seek;
        op.npoll = comp ? comp->npoll : 0;
        op.weak = false;
        op.error = (comp && comp->type != T_OK && (src->f == F_SEND || src->f == F_TXN)) ? comp->error : 0;
        op.error_id = -1;
        if (op.error == 1 || op.error == 2) {
            op.error_id = static_cast<int32_t>(errors.size());
            errors.push_back(comp->error_s);
        }
        op.sb = static_cast<uint32_t>(sends.size());
        const std::vector<Send>* ss = &src->sends;
        if (comp && inv && comp->sends.empty() && (src->f == F_SEND || src->f == F_TXN)) ss = &inv->sends;
        sends.insert(sends.end(), ss->begin(), ss->end());
        op.se = static_cast<uint32_t>(sends.size());
        if (weak_acks && op.type == T_OK && op.f == F_SEND) {  // acks 0 or 1: an ok send counts as info
            op.type = T_INFO;
            op.weak = true;
            for (uint32_t q = op.sb; q < op.se; ++q) sends[q].has_off = false;
        }
        op.pb = static_cast<uint32_t>(pkeys.size());
        if (comp) {
            uint32_t base = static_cast<uint32_t>(recs.size());
            recs.insert(recs.end(), comp->recs.begin(), comp->recs.end());
            for (PollKey pk : comp->polls) {
                pk.rb += base;
                pk.re += base;
                pkeys.push_back(pk);
            }
        }
        op.pe = static_cast<uint32_t>(pkeys.size());
        op.kb = static_cast<uint32_t>(akeys.size());
        akeys.insert(akeys.end(), src->keys.begin(), src->keys.end());
        op.ke = static_cast<uint32_t>(akeys.size());
        op.tb = static_cast<uint32_t>(touched.size());
        if (comp) touched.insert(touched.end(), comp->touched.begin(), comp->touched.end());
        op.te = static_cast<uint32_t>(touched.size());
        ops.push_back(op);
    }

    void feed(Line& L) {
        if (L.index != n_lines) fallback("indices are not dense");
        if (L.time >= (int64_t(1) << 62) || L.time <= -(int64_t(1) << 62))
            fallback("a time beyond 2**62 ns (the fast path's arithmetic would overflow)");
        ++n_lines;
        last_time = std::max(last_time, L.time);
        if (L.nemesis) {
            // SequenceCheck
            if (L.type == T_INVOKE) {
                nemesis_open_seq = true;
                nemesis_open_f = L.nemesis_f;
            } else {
                if (!nemesis_open_seq || nemesis_open_f != L.nemesis_f) fallback("a bad nemesis sequence");
                nemesis_open_seq = false;
            }
            if (std::find(nemesis_fs.begin(), nemesis_fs.end(), L.nemesis_f) == nemesis_fs.end())
                nemesis_fs.push_back(L.nemesis_f);
            // compile_ops
            if (L.type == T_INVOKE) {
                nemesis_span_open = true;
                nemesis_span_start = L.time;
            } else {
                nemesis.emplace_back(nemesis_span_open ? nemesis_span_start : L.time, L.time);
                nemesis_span_open = false;
            }
            return;
        }
        if (L.type == T_INVOKE) {
            auto it = open_client.find(L.process);
            if (it != open_client.end()) fallback("a process invokes again before its op completed");
            open_client.emplace(L.process, L);
            return;
        }
        auto it = open_client.find(L.process);
        if (it == open_client.end()) fallback("a completion with no open invoke");
        if (it->second.f != L.f) fallback("a completion whose f does not match its invoke");
        fold(&it->second, &L, L.time);
        open_client.erase(it);
    }

    void finish_reading() {
        // the open ops, in the order Python's dict keeps them (insertion order): sorting by index
        // below makes their order irrelevant
        for (auto& kv : open_client) fold(&kv.second, nullptr, last_time);
        open_client.clear();
        if (nemesis_span_open) nemesis.emplace_back(nemesis_span_start, last_time);
        std::sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) { return a.index < b.index; });
    }

    void read_text(const char* b, const char* e) {
        Json j;
        Line L;
        const char* p = b;
        while (p < e) {
            const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(e - p)));
            const char* le = nl ? nl : e;
            line(j, L, p, le);
            p = nl ? nl + 1 : e;
        }
    }

    void line(Json& j, Line& L, const char* p, const char* le) {
        bool blank = true;
        for (const char* q = p; q < le; ++q) {
            unsigned char c = static_cast<unsigned char>(*q);
            if (c >= 0x80) fallback("a line that is not ASCII");
            if (c == '\r') fallback("a carriage return");
            if (!(c == ' ' || c == '\t' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1f))) blank = false;
        }
        if (blank) return;
        poll_signals();
        uint32_t root = j.parse(p, le);
        parse_line(j, root, L);
        feed(L);
    }

    void read_file(const std::string& path) {
        FILE* fh = std::fopen(path.c_str(), "rb");
        if (!fh) fallback("cannot open the file");
        std::vector<char> buf(1 << 22);
        std::string carry;
        Json j;
        Line L;
        try {
            while (true) {
                size_t got = std::fread(buf.data(), 1, buf.size(), fh);
                if (got == 0) break;
                const char* p = buf.data();
                const char* e = buf.data() + got;
                while (p < e) {
                    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(e - p)));
                    if (!nl) {
                        carry.append(p, static_cast<size_t>(e - p));
                        break;
                    }
                    if (!carry.empty()) {
                        carry.append(p, static_cast<size_t>(nl - p));
                        line(j, L, carry.data(), carry.data() + carry.size());
                        carry.clear();
                    } else {
                        line(j, L, p, nl);
                    }
                    p = nl + 1;
                }
            }
            if (std::ferror(fh)) fallback("a read error");
            if (!carry.empty()) line(j, L, carry.data(), carry.data() + carry.size());
        } catch (...) {
            std::fclose(fh);
            throw;
        }
        std::fclose(fh);
    }

    // ---------------------------------------------------------------- reads

    // op.reads(): key -> values in read order over all poll micro-ops, keys in first-seen order
    void reads_of(const Op& op, std::vector<std::pair<int32_t, std::vector<int64_t>>>& out) const {
        out.clear();
        for (uint32_t q = op.pb; q < op.pe; ++q) {
            const PollKey& pk = pkeys[q];
            std::vector<int64_t>* vs = nullptr;
            for (auto& kv : out)
                if (kv.first == pk.key) vs = &kv.second;
            if (!vs) {
                out.emplace_back(pk.key, std::vector<int64_t>());
                vs = &out.back().second;
            }
            for (uint32_t r = pk.rb; r < pk.re; ++r) vs->push_back(recs[r].v);
        }
    }
    void writes_of(const Op& op, std::vector<std::pair<int32_t, std::vector<int64_t>>>& out) const {
        out.clear();
        for (uint32_t s = op.sb; s < op.se; ++s) {
            std::vector<int64_t>* vs = nullptr;
            for (auto& kv : out)
                if (kv.first == sends[s].key) vs = &kv.second;
            if (!vs) {
                out.emplace_back(sends[s].key, std::vector<int64_t>());
                vs = &out.back().second;
            }
            vs->push_back(sends[s].v);
        }
    }
    int32_t first_of(int32_t key, int64_t v) {
        ValInfo* vi = keys[static_cast<size_t>(key)].find(v);
        return vi ? vi->first : -1;
    }

    // ---------------------------------------------------------------- analyse

    void analyse() {
        for (size_t p = 0; p < ops.size(); ++p) {
            const Op& op = ops[p];
            poll_signals();
            for (uint32_t s = op.sb; s < op.se; ++s) {
                KeyState& k = keys[static_cast<size_t>(sends[s].key)];
                ValInfo& vi = k.get(sends[s].v);
                if (vi.writer >= 0 && vi.writer != static_cast<int32_t>(p))
                    fallback("a value sent twice to a key (the Python checker says so)");
                vi.writer = static_cast<int32_t>(p);
                if (op.type == T_FAIL) {
                    vi.failed = true;
                    k.failed = true;
                }
            }
            if (op.type == T_OK) {
                for (uint32_t q = op.pb; q < op.pe; ++q) {
                    const PollKey& pk = pkeys[q];
                    KeyState& k = keys[static_cast<size_t>(pk.key)];
                    k.ok_reads = true;
                    for (uint32_t r = pk.rb; r < pk.re; ++r) k.get(recs[r].v).ok_read = true;
                }
            }
        }
        committed.assign(ops.size(), 0);
        for (size_t p = 0; p < ops.size(); ++p) {
            const Op& op = ops[p];
            if (op.type == T_OK) {
                committed[p] = 1;
            } else if (op.type == T_INFO && !op.weak) {
                for (uint32_t s = op.sb; s < op.se; ++s) {
                    ValInfo* vi = keys[static_cast<size_t>(sends[s].key)].find(sends[s].v);
                    if (vi && vi->ok_read) {
                        committed[p] = 1;
                        break;
                    }
                }
            }
        }
        auto touch = [&](int32_t key) -> KeyState& {
            KeyState& k = keys[static_cast<size_t>(key)];
            if (!k.logged) {
                k.logged = true;
                key_order.push_back(key);
            }
            return k;
        };
        for (size_t p = 0; p < ops.size(); ++p) {
            const Op& op = ops[p];
            if (!txn_f(op.f)) continue;
            if (committed[p]) {
                for (uint32_t s = op.sb; s < op.se; ++s)
                    if (sends[s].has_off) touch(sends[s].key).log.emplace_back(sends[s].off, sends[s].v);
            }
            for (uint32_t q = op.pb; q < op.pe; ++q) {
                const PollKey& pk = pkeys[q];
                KeyState& k = touch(pk.key);
                for (uint32_t r = pk.rb; r < pk.re; ++r) k.log.emplace_back(recs[r].off, recs[r].v);
            }
        }
        for (int32_t key : key_order) {
            KeyState& k = keys[static_cast<size_t>(key)];
            // offset -> values in insertion order, deduplicated: a stable sort by offset
            std::vector<std::pair<int64_t, int64_t>>& log = k.log;
            std::stable_sort(log.begin(), log.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
            size_t i = 0;
            while (i < log.size()) {
                size_t j = i;
                while (j < log.size() && log[j].first == log[i].first) ++j;
                int32_t dense = static_cast<int32_t>(k.by_index.size());
                k.by_index.push_back(log[i].second);
                k.offsets.push_back(log[i].first);
                k.off_start.push_back(static_cast<uint32_t>(k.off_vals.size()));
                for (size_t q = i; q < j; ++q) {
                    int64_t v = log[q].second;
                    bool dup = false;
                    for (size_t r = k.off_start.back(); r < k.off_vals.size(); ++r)
                        if (k.off_vals[r] == v) dup = true;
                    if (dup) continue;
                    k.off_vals.push_back(v);
                    ValInfo& vi = k.get(v);
                    if (vi.first < 0) vi.first = dense;
                    vi.last = dense;
                }
                i = j;
            }
            k.off_start.push_back(static_cast<uint32_t>(k.off_vals.size()));
            std::vector<std::pair<int64_t, int64_t>>().swap(k.log);
        }
    }

    // ---------------------------------------------------------------- the Jepsen-parity checks and the rest

    void check_plain() {
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd, wr;
        // empty-history
        bool any = false;
        for (const Op& op : ops)
            if (op.completed && txn_f(op.f) && (op.type == T_OK || op.type == T_INFO)) any = true;
        if (!any)
            add("empty-history", false, [&] {
                py::dict ev;
                ev["ops"] = py::list();
                ev["explanation"] = "no send, poll or txn operation completed (ok or info): the history shows nothing "
                                    "about the broker, so it cannot be judged valid";
                return ev;
            });
        check_version_orders();
        check_reads();
        check_lost_writes();
        for (const Op& op : ops) {  // the ok writes nobody read (lost ones aside)
            if (op.type != T_OK) continue;
            for (uint32_t s = op.sb; s < op.se; ++s) {
                ValInfo* vi = keys[static_cast<size_t>(sends[s].key)].find(sends[s].v);
                if (!(vi && (vi->ok_read || vi->lost))) ++unread;
            }
        }
        // within-an-op: check_internal and _pairs_in_op
        auto pairs_in_op = [&](const Op& op, int32_t key, const std::vector<int64_t>& vs, bool sent) {
            KeyState& k = keys[static_cast<size_t>(key)];
            if (!k.logged || vs.size() < 2) return;
            const char* verb = sent ? "sent" : "read";
            for (size_t i = 0; i + 1 < vs.size(); ++i) {
                int64_t v1 = vs[i], v2 = vs[i + 1];
                int32_t i1 = first_of(key, v1), i2 = first_of(key, v2);
                if (i1 < 0 || i2 < 0) continue;
                int32_t delta = i2 - i1;
                if (delta > 1) {
                    std::vector<int64_t> skipped(k.by_index.begin() + i1 + 1, k.by_index.begin() + i2);
                    const char* kind = sent ? "int-send-skip" : "int-poll-skip";
                    add(kind, sent, [&] {
                        py::dict ev;
                        ev["key"] = kname(key);
                        ev["values"] = py::cast(std::vector<int64_t>{v1, v2});
                        ev["delta"] = delta;
                        ev["skipped"] = py::cast(head(skipped, 20));
                        ev["ops"] = py::cast(std::vector<int64_t>{op.index});
                        ev["explanation"] = "op " + std::to_string(op.index) + " " + verb + " " + std::to_string(v1) +
                                            " then " + std::to_string(v2) + " in " + kname(key) + ", but " +
                                            std::to_string(skipped.size()) + " other record(s) " +
                                            repr(head(skipped, 5)) + " lie between them" +
                                            (sent ? " (allowed: transactions do not isolate writes)" : "");
                        return ev;
                    });
                } else if (delta < 1) {
                    const char* kind = sent ? "int-nonmonotonic-send" : "int-nonmonotonic-poll";
                    add(kind, false, [&] {
                        py::dict ev;
                        ev["key"] = kname(key);
                        ev["values"] = py::cast(std::vector<int64_t>{v1, v2});
                        ev["delta"] = delta;
                        ev["ops"] = py::cast(std::vector<int64_t>{op.index});
                        ev["explanation"] = "op " + std::to_string(op.index) + " " + verb + " " + std::to_string(v1) +
                                            " then " + std::to_string(v2) + " in " + kname(key) + ", but " +
                                            std::to_string(v2) + " is " +
                                            (delta == 0 ? "at the same position" : "earlier in the log");
                        return ev;
                    });
                }
            }
        };
        for (const Op& op : ops) {
            if (!op.completed || !txn_f(op.f)) continue;
            if (op.npoll) {
                reads_of(op, rd);
                for (auto& kv : rd) {
                    if (std::find(touched.begin() + op.tb, touched.begin() + op.te, kv.first) != touched.begin() + op.te)
                        continue;  // a rebalance moved the key within the op
                    pairs_in_op(op, kv.first, kv.second, false);
                }
            }
            if (op.se - op.sb > 1) {
                writes_of(op, wr);
                for (auto& kv : wr) pairs_in_op(op, kv.first, kv.second, true);
            }
        }
        check_process_order();
        check_intermediate_reads();
        if (staleness) check_staleness();
        check_nonatomic();
        if (final_read) check_final_read();
        if (idempotence) check_idempotence();
    }

    // _check_final_read with a performed final read: anything it reports hands the history over
    void check_final_read() {
        if (!final_reached_end)
            add("stale-after-heal", false, [&] {
                py::dict ev;
                ev["ops"] = py::list();
                ev["explanation"] = "after every fault was healed the final read could not reach the end of every "
                                    "partition within " + final_bound + " ms";
                return ev;
            });
        std::vector<int32_t> end_of(keys.size(), -1);  // position in final_ends
        for (size_t q = 0; q < final_ends.size(); ++q) {
            auto it = key_ids.find(final_ends[q]);
            if (it != key_ids.end()) end_of[static_cast<size_t>(it->second)] = static_cast<int32_t>(q);
        }
        auto ends_get = [&](int32_t key) {
            int32_t q = end_of[static_cast<size_t>(key)];
            return q < 0 ? std::string("None") : final_end_values[static_cast<size_t>(q)];
        };
        std::set<std::pair<int32_t, int64_t>> reported_kv;
        for (const Op& op : ops) {  // the unread ok writes (lost ones aside), acknowledged before the final read
            if (op.type != T_OK || op.time >= final_start) continue;
            for (uint32_t s = op.sb; s < op.se; ++s) {
                const Send& sd = sends[s];
                ValInfo* vi = keys[static_cast<size_t>(sd.key)].find(sd.v);
                if (vi && (vi->ok_read || vi->lost)) continue;
                if (!final_reached_end && end_of[static_cast<size_t>(sd.key)] < 0) continue;
                reported_kv.insert({sd.key, sd.v});
                add("unread-after-heal", false, [&] {
                    py::dict ev;
                    ev["key"] = kname(sd.key);
                    ev["value"] = sd.v;
                    ev["offset"] = sd.has_off ? py::object(py::int_(sd.off)) : py::object(py::none());
                    ev["writer"] = op.index;
                    ev["ops"] = py::cast(std::vector<int64_t>{op.index});
                    ev["explanation"] = "value " + std::to_string(sd.v) + " was acknowledged at offset " +
                                        (sd.has_off ? std::to_string(sd.off) : std::string("None")) + " of " +
                                        kname(sd.key) + " (op " + std::to_string(op.index) +
                                        ") but the final read after healing read " + kname(sd.key) + " to its end (" +
                                        ends_get(sd.key) + ") without it: the write is lost";
                    return ev;
                });
            }
        }
        // values the final read saw, and the first ok op that read each value before it
        std::vector<I64Index> final_seen(keys.size()), readers(keys.size());
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd;
        std::vector<int64_t> reader_ops;
        for (const Op& op : ops) {
            if (op.type != T_OK || op.npoll == 0) continue;
            reads_of(op, rd);
            for (auto& r : rd)
                for (int64_t v : r.second) {
                    if (op.time >= final_start) {
                        final_seen[static_cast<size_t>(r.first)].put(v, 1);
                    } else {
                        int32_t& slot = readers[static_cast<size_t>(r.first)].slot(v, static_cast<int32_t>(reader_ops.size()));
                        if (static_cast<size_t>(slot) == reader_ops.size()) reader_ops.push_back(op.index);
                    }
                }
        }
        for (const Op& op : ops) {
            if (op.type != T_OK || op.time >= final_start) continue;
            for (uint32_t s = op.sb; s < op.se; ++s) {
                const Send& sd = sends[s];
                size_t k = static_cast<size_t>(sd.key);
                if (end_of[k] < 0 || reported_kv.count({sd.key, sd.v}) || final_seen[k].get(sd.v) >= 0) continue;
                int32_t rid = readers[k].get(sd.v);
                if (rid < 0) continue;
                int64_t reader = reader_ops[static_cast<size_t>(rid)];
                add("unread-after-heal", false, [&] {
                    py::dict ev;
                    ev["key"] = kname(sd.key);
                    ev["value"] = sd.v;
                    ev["offset"] = sd.has_off ? py::object(py::int_(sd.off)) : py::object(py::none());
                    ev["writer"] = op.index;
                    ev["ops"] = py::cast(std::vector<int64_t>{op.index, reader});
                    ev["explanation"] = "value " + std::to_string(sd.v) + " was acknowledged at offset " +
                                        (sd.has_off ? std::to_string(sd.off) : std::string("None")) + " of " +
                                        kname(sd.key) + " (op " + std::to_string(op.index) + ") and read by op " +
                                        std::to_string(reader) + ", but the final read after healing read " +
                                        kname(sd.key) + " to its end (" + ends_get(sd.key) +
                                        ") without it: the write is lost";
                    return ev;
                });
            }
        }
    }

    void check_idempotence() {
        for (auto& r : reports)
            if ((r.first.first == "lost-write" || r.first.first == "unread-after-heal") && r.second.count) return;
        for (const std::string& f : nemesis_fs)
            if (std::find(tcp_breaking.begin(), tcp_breaking.end(), f) != tcp_breaking.end()) return;
        for (const Op& op : ops) {
            if (op.f != F_SEND || op.type == T_OK || op.error == 0) continue;
            if (op.error == 3) fallback("an error that is not a string");
            if (op.error != 2) continue;
            const std::string& error = errors[static_cast<size_t>(op.error_id)];
            std::string told;
            for (const char* name : IDEMPOTENCE_ERRORS)
                if (error.find(name) != std::string::npos) {
                    told = name;
                    break;
                }
            add("idempotence-error", false, [&] {
                py::dict ev;
                ev["key"] = op.se > op.sb ? py::object(py::str(kname(sends[op.sb].key))) : py::object(py::none());
                ev["error"] = error;
                ev["ops"] = py::cast(std::vector<int64_t>{op.index});
                ev["explanation"] = "process " + std::to_string(op.process) + "'s idempotent producer was told " + told +
                                    " (op " + std::to_string(op.index) +
                                    "), though no record of the run was lost: its sequence had no gap and nobody "
                                    "could fence it";
                return ev;
            });
        }
    }

    // keys in the order of their names (Python's sorted over str keys)
    std::vector<int32_t> keys_by_name(bool (*pick)(const KeyState&)) const {
        std::vector<int32_t> out;
        for (size_t k = 0; k < keys.size(); ++k)
            if (pick(keys[k])) out.push_back(static_cast<int32_t>(k));
        std::sort(out.begin(), out.end(), [&](int32_t a, int32_t b) { return kname(a) < kname(b); });
        return out;
    }

    // sorted(values, key=repr)
    static std::vector<int64_t> by_repr(std::vector<int64_t> v) {
        std::sort(v.begin(), v.end(), [](int64_t a, int64_t b) { return std::to_string(a) < std::to_string(b); });
        return v;
    }

    void check_version_orders() {
        struct Found {
            bool dup;
            int32_t key;
            int64_t x;  // the offset, or the value
            std::vector<int64_t> vals;  // the values, or the offsets
        };
        std::vector<Found> found;
        for (int32_t key : keys_by_name([](const KeyState& k) { return k.logged; })) {
            KeyState& k = keys[static_cast<size_t>(key)];
            bool dups = false;
            for (const ValInfo& vi : k.info)
                if (vi.first >= 0 && vi.first != vi.last) dups = true;
            std::vector<int64_t> order;  // values by first position
            std::unordered_map<int64_t, std::vector<int64_t>> positions;
            for (size_t i = 0; i < k.by_index.size(); ++i) {
                uint32_t b = k.off_start[i], e = k.off_start[i + 1];
                if (e - b > 1)
                    found.push_back(Found{false, key, k.offsets[i],
                                          by_repr(std::vector<int64_t>(k.off_vals.begin() + b, k.off_vals.begin() + e))});
                if (!dups) continue;
                for (uint32_t q = b; q < e; ++q) {
                    auto& ps = positions[k.off_vals[q]];
                    if (ps.empty()) order.push_back(k.off_vals[q]);
                    ps.push_back(k.offsets[i]);
                }
            }
            for (int64_t v : order)
                if (positions[v].size() > 1) found.push_back(Found{true, key, v, positions[v]});
        }
        if (found.empty()) return;
        // the ops that wrote or read them, for the first 400
        std::map<std::pair<int32_t, int64_t>, std::set<int64_t>> at_offset, of_value;
        for (size_t f = 0; f < found.size() && f < 400; ++f)
            (found[f].dup ? of_value : at_offset)[{found[f].key, found[f].x}];
        for (size_t p = 0; p < ops.size(); ++p) {
            const Op& op = ops[p];
            if (!op.completed) continue;
            for (uint32_t s = op.sb; s < op.se; ++s) {
                if (sends[s].has_off && committed[p]) {
                    auto it = at_offset.find({sends[s].key, sends[s].off});
                    if (it != at_offset.end()) it->second.insert(op.index);
                }
                auto it = of_value.find({sends[s].key, sends[s].v});
                if (it != of_value.end()) it->second.insert(op.index);
            }
            for (uint32_t q = op.pb; q < op.pe; ++q)
                for (uint32_t r = pkeys[q].rb; r < pkeys[q].re; ++r) {
                    auto it = at_offset.find({pkeys[q].key, recs[r].off});
                    if (it != at_offset.end()) it->second.insert(op.index);
                    auto jt = of_value.find({pkeys[q].key, recs[r].v});
                    if (jt != of_value.end()) jt->second.insert(op.index);
                }
        }
        for (const Found& f : found) {
            auto& m = f.dup ? of_value : at_offset;
            auto it = m.find({f.key, f.x});
            std::vector<int64_t> seen;
            if (it != m.end()) seen.assign(it->second.begin(), it->second.end());
            if (!f.dup) {
                add("inconsistent-offsets", false, [&] {
                    py::dict ev;
                    ev["key"] = kname(f.key);
                    ev["offset"] = f.x;
                    ev["values"] = py::cast(f.vals);
                    ev["ops"] = py::cast(seen);
                    ev["explanation"] = "offset " + std::to_string(f.x) + " of " + kname(f.key) + " holds " +
                                        std::to_string(f.vals.size()) + " different values " + repr(f.vals) +
                                        ": writers or readers disagree about the log";
                    return ev;
                });
            } else {
                add("duplicate", false, [&] {
                    py::dict ev;
                    ev["key"] = kname(f.key);
                    ev["value"] = f.x;
                    ev["offsets"] = py::cast(f.vals);
                    ev["count"] = f.vals.size();
                    ev["ops"] = py::cast(seen);
                    ev["explanation"] = "value " + std::to_string(f.x) + " appears at " + std::to_string(f.vals.size()) +
                                        " offsets " + repr(f.vals) + " of " + kname(f.key) + "; it was written once";
                    return ev;
                });
            }
        }
    }

    // G1a (an ok op read a failed write) and precommitted-read (an op read its own write)
    void check_reads() {
        for (const Op& op : ops) {
            if ((op.f != F_POLL && op.f != F_TXN) || op.npoll == 0) continue;
            for (uint32_t q = op.pb; q < op.pe; ++q) {
                const PollKey& pk = pkeys[q];
                KeyState& k = keys[static_cast<size_t>(pk.key)];
                for (uint32_t r = pk.rb; r < pk.re; ++r) {
                    int64_t v = recs[r].v;
                    if (op.type == T_OK && k.failed) {
                        ValInfo* vi = k.find(v);
                        if (vi && vi->failed) {
                            int64_t w = ops[static_cast<size_t>(vi->writer)].index;
                            add("G1a", false, [&] {
                                py::dict ev;
                                ev["key"] = kname(pk.key);
                                ev["value"] = v;
                                ev["writer"] = w;
                                ev["ops"] = py::cast(std::vector<int64_t>{w, op.index});
                                ev["explanation"] = "op " + std::to_string(op.index) + " read " + std::to_string(v) +
                                                    " from " + kname(pk.key) + " although the op that wrote it (op " +
                                                    std::to_string(w) + ") failed: an aborted read";
                                return ev;
                            });
                        }
                    }
                    bool own = false;
                    for (uint32_t s = op.sb; s < op.se; ++s)
                        if (sends[s].key == pk.key && sends[s].v == v) own = true;
                    if (own)
                        add("precommitted-read", precommitted_allowed, [&] {
                            py::dict ev;
                            ev["key"] = kname(pk.key);
                            ev["value"] = v;
                            ev["ops"] = py::cast(std::vector<int64_t>{op.index});
                            ev["explanation"] = "op " + std::to_string(op.index) + " read " + std::to_string(v) +
                                                " from " + kname(pk.key) +
                                                ", which it sent itself in the same, still open, transaction: a "
                                                "consumer saw uncommitted data";
                            return ev;
                        });
                }
            }
        }
    }

    // Jepsen's lost-write: below the highest position an ok poll read in a key, every value of a
    // must-have-committed write must have been read by some ok poll
    void check_lost_writes() {
        struct Found {
            int32_t key;
            int64_t v, off;
            int32_t writer, bound;
        };
        std::vector<Found> found;
        for (int32_t key : keys_by_name([](const KeyState& k) { return k.ok_reads; })) {
            KeyState& k = keys[static_cast<size_t>(key)];
            if (!k.logged) continue;
            int32_t bound = -1;
            for (const ValInfo& vi : k.info)
                if (vi.ok_read && vi.first >= 0) bound = std::max(bound, vi.first);
            if (bound < 0) continue;
            for (size_t i = 0; i < k.by_index.size(); ++i)  // values in the order of o.last
                for (uint32_t q = k.off_start[i]; q < k.off_start[i + 1]; ++q) {
                    int64_t v = k.off_vals[q];
                    ValInfo& vi = *k.find(v);
                    if (vi.first != static_cast<int32_t>(i) || vi.last > bound || vi.ok_read) continue;
                    if (vi.writer < 0 || !committed[static_cast<size_t>(vi.writer)]) continue;
                    found.push_back(Found{key, v, k.offsets[i], vi.writer, bound});
                }
        }
        if (found.empty()) return;
        // the first ok op that read each key's highest read value
        std::map<std::pair<int32_t, int64_t>, int64_t> max_readers;
        for (const Found& f : found) max_readers[{f.key, keys[static_cast<size_t>(f.key)].by_index[static_cast<size_t>(f.bound)]}] = -1;
        for (const Op& op : ops) {
            if (op.type != T_OK) continue;
            for (uint32_t q = op.pb; q < op.pe; ++q)
                for (uint32_t r = pkeys[q].rb; r < pkeys[q].re; ++r) {
                    auto it = max_readers.find({pkeys[q].key, recs[r].v});
                    if (it != max_readers.end() && it->second < 0) it->second = op.index;
                }
        }
        for (const Found& f : found) {
            KeyState& k = keys[static_cast<size_t>(f.key)];
            k.find(f.v)->lost = true;
            int64_t top = k.by_index[static_cast<size_t>(f.bound)];
            int64_t max_read = max_readers[{f.key, top}];
            const Op& w = ops[static_cast<size_t>(f.writer)];
            add("lost-write", false, [&] {
                py::dict ev;
                ev["key"] = kname(f.key);
                ev["value"] = f.v;
                ev["offset"] = f.off;
                ev["index"] = k.find(f.v)->first;
                ev["max_read_index"] = f.bound;
                ev["writer"] = w.index;
                std::vector<int64_t> o{w.index};
                if (max_read >= 0) o.push_back(max_read);
                ev["ops"] = py::cast(o);
                ev["explanation"] = "value " + std::to_string(f.v) + " was " +
                                    (w.type == T_OK ? "acknowledged" : "written (by a crashed op, read elsewhere)") +
                                    " at offset " + std::to_string(f.off) + " of " + kname(f.key) + " (op " +
                                    std::to_string(w.index) + ") but no ok poll ever read it, although op " +
                                    (max_read >= 0 ? std::to_string(max_read) : std::string("None")) + " read " +
                                    std::to_string(top) + ", at a later position of " + kname(f.key);
                return ev;
            });
        }
    }

    struct Last {
        bool has;  // false: None (the op read nothing of the key)
        int64_t v;
        int64_t op;  // its op's index
    };

    void check_process_order() {
        std::unordered_map<int64_t, std::vector<uint32_t>> by_process;
        for (uint32_t p = 0; p < ops.size(); ++p)
            if (ops[p].completed) by_process[ops[p].process].push_back(p);
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd, wr;
        // processes in the order of their repr, as Python's sorted(by_process, key=repr)
        std::vector<std::pair<std::string, int64_t>> procs;
        for (auto& kv : by_process) procs.emplace_back(std::to_string(kv.first), kv.first);
        std::sort(procs.begin(), procs.end());
        for (auto& pr : procs) {
            std::unordered_map<int32_t, Last> last_read, last_send;
            for (uint32_t p : by_process[pr.second]) {
                const Op& op = ops[p];
                if (op.f == F_ASSIGN || op.f == F_SUBSCRIBE) {
                    if (op.type == T_OK || op.type == T_INFO) {
                        auto covered = [&](int32_t key) {
                            for (uint32_t q = op.kb; q < op.ke; ++q)
                                if (akeys[q] == key) return true;
                            return false;
                        };
                        for (auto it = last_read.begin(); it != last_read.end();)
                            it = (op.seek || !covered(it->first)) ? last_read.erase(it) : std::next(it);
                        for (auto it = last_send.begin(); it != last_send.end();)
                            it = !covered(it->first) ? last_send.erase(it) : std::next(it);
                    }
                    continue;
                }
                if (!txn_f(op.f)) continue;
                if (op.npoll && (op.f == F_POLL || op.f == F_TXN)) {
                    reads_of(op, rd);
                    for (auto& r : rd) {
                        auto prev = last_read.find(r.first);
                        if (prev == last_read.end() || r.second.empty()) continue;
                        across(r.first, prev->second, op, r.second[0], true);
                    }
                    if (op.type == T_OK)
                        for (auto& r : rd)
                            last_read[r.first] = r.second.empty() ? Last{false, 0, op.index}
                                                                  : Last{true, r.second.back(), op.index};
                }
                if (op.se != op.sb && (op.type == T_OK || op.type == T_INFO)) {
                    writes_of(op, wr);
                    for (auto& w : wr) {
                        auto prev = last_send.find(w.first);
                        if (prev != last_send.end()) across(w.first, prev->second, op, w.second[0], false);
                        last_send[w.first] = Last{true, w.second.back(), op.index};
                    }
                }
            }
        }
    }
    // _across: a poll-skip (reads only) or a nonmonotonic-poll / nonmonotonic-send
    void across(int32_t key, const Last& prev, const Op& op, int64_t v2, bool reads) {
        KeyState& k = keys[static_cast<size_t>(key)];
        if (!k.logged || !prev.has) return;
        int64_t v1 = prev.v;
        int32_t i1 = first_of(key, v1), i2 = first_of(key, v2);
        if (i1 < 0 || i2 < 0) return;
        int32_t delta = i2 - i1;
        const char* verb = reads ? "read" : "sent";
        if (delta > 1 && reads) {
            std::vector<int64_t> skipped(k.by_index.begin() + i1 + 1, k.by_index.begin() + i2);
            add("poll-skip", false, [&] {
                py::dict ev;
                ev["key"] = kname(key);
                ev["values"] = py::cast(std::vector<int64_t>{v1, v2});
                ev["delta"] = delta;
                ev["skipped"] = py::cast(head(skipped, 20));
                ev["ops"] = py::cast(std::vector<int64_t>{prev.op, op.index});
                ev["explanation"] = "process " + std::to_string(op.process) + " " + verb + " " + std::to_string(v1) +
                                    " from " + kname(key) + " (op " + std::to_string(prev.op) + ") and next " +
                                    std::to_string(v2) + " (op " + std::to_string(op.index) + "), skipping " +
                                    std::to_string(skipped.size()) + " record(s) " + repr(head(skipped, 5));
                return ev;
            });
        } else if (delta < 1) {
            add(reads ? "nonmonotonic-poll" : "nonmonotonic-send", false, [&] {
                py::dict ev;
                ev["key"] = kname(key);
                ev["values"] = py::cast(std::vector<int64_t>{v1, v2});
                ev["delta"] = delta;
                ev["ops"] = py::cast(std::vector<int64_t>{prev.op, op.index});
                ev["explanation"] = "process " + std::to_string(op.process) + " " + verb + " " + std::to_string(v1) +
                                    " to/from " + kname(key) + " (op " + std::to_string(prev.op) + ") and next " +
                                    std::to_string(v2) + " (op " + std::to_string(op.index) + "), which is " +
                                    (delta == 0 ? "at the same position" : "earlier in the log");
                return ev;
            });
        }
    }

    void check_intermediate_reads() {
        // (writer position, key) -> the highest index it wrote there, for committed ops sending > 1
        std::unordered_map<uint64_t, int32_t> last_write;
        for (uint32_t p = 0; p < ops.size(); ++p) {
            const Op& op = ops[p];
            if (!committed[p] || op.se - op.sb <= 1) continue;
            for (uint32_t s = op.sb; s < op.se; ++s) {
                int32_t i = first_of(sends[s].key, sends[s].v);
                if (i < 0) continue;
                uint64_t k = (static_cast<uint64_t>(p) << 32) | static_cast<uint32_t>(sends[s].key);
                auto it = last_write.find(k);
                if (it == last_write.end()) last_write.emplace(k, i);
                else it->second = std::max(it->second, i);
            }
        }
        if (last_write.empty()) return;
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd;
        for (uint32_t p = 0; p < ops.size(); ++p) {
            const Op& op = ops[p];
            if (op.type != T_OK || op.pb == op.pe) continue;
            reads_of(op, rd);
            for (auto& r : rd) {
                KeyState& k = keys[static_cast<size_t>(r.first)];
                if (!k.logged || r.second.empty()) continue;
                int64_t v = r.second[0];
                int32_t best = first_of(r.first, v);
                for (int64_t x : r.second) {
                    int32_t f = first_of(r.first, x);
                    if (f > best) {
                        best = f;
                        v = x;
                    }
                }
                int32_t i = first_of(r.first, v);
                ValInfo* vi = k.find(v);
                if (i < 0 || !vi || vi->writer < 0 || ops[static_cast<size_t>(vi->writer)].index == op.index) continue;
                uint64_t kk = (static_cast<uint64_t>(vi->writer) << 32) | static_cast<uint32_t>(r.first);
                auto it = last_write.find(kk);
                if (it != last_write.end() && it->second > i) {
                    int64_t later = k.by_index[static_cast<size_t>(it->second)];
                    int64_t w = ops[static_cast<size_t>(vi->writer)].index;
                    add("G1b", true, [&] {
                        py::dict ev;
                        ev["key"] = kname(r.first);
                        ev["value"] = v;
                        ev["later"] = later;
                        ev["ops"] = py::cast(std::vector<int64_t>{w, op.index});
                        ev["explanation"] = "op " + std::to_string(op.index) + " read " + kname(r.first) + " up to " +
                                            std::to_string(v) + ", written by op " + std::to_string(w) +
                                            ", which also wrote the later " + std::to_string(later) +
                                            " there: it saw that transaction's intermediate state (Kafka allows "
                                            "it: a fetch may end inside a transaction)";
                        return ev;
                    });
                }
            }
        }
    }

    void check_staleness() {
        // as Python's max(..., default=0): 0 without faults, else the last fault's end (which may
        // be negative: times are whatever clock the recorder used)
        int64_t end = nemesis.empty() ? 0 : std::numeric_limits<int64_t>::min();
        for (auto& s : nemesis) end = std::max(end, s.second);
        int64_t bound = staleness_bound_ms * 1000000;
        std::vector<std::vector<std::pair<int32_t, int64_t>>> acked(keys.size());
        for (const Op& op : ops) {
            if (op.type != T_OK) continue;
            for (uint32_t s = op.sb; s < op.se; ++s) {
                int32_t i = first_of(sends[s].key, sends[s].v);
                if (i >= 0) acked[static_cast<size_t>(sends[s].key)].emplace_back(i, op.time);
            }
        }
        struct Suffix {
            std::vector<int32_t> idx;
            std::vector<int64_t> t;  // the earliest ack time at or after j
            std::vector<int32_t> at;  // the index of that ack
        };
        std::vector<Suffix> suffix(keys.size());
        std::vector<char> has_suffix(keys.size(), 0);
        for (size_t key = 0; key < keys.size(); ++key) {
            auto& items = acked[key];
            if (items.empty()) continue;
            has_suffix[key] = 1;
            std::sort(items.begin(), items.end());
            size_t n = items.size();
            std::vector<size_t> best(n);
            long m = -1;
            for (long jx = static_cast<long>(n) - 1; jx >= 0; --jx) {
                if (m < 0 || items[static_cast<size_t>(jx)].second < items[static_cast<size_t>(m)].second) m = jx;
                best[static_cast<size_t>(jx)] = static_cast<size_t>(m);
            }
            Suffix& s = suffix[key];
            for (size_t jx = 0; jx < n; ++jx) {
                s.idx.push_back(items[jx].first);
                s.t.push_back(items[best[jx]].second);
                s.at.push_back(items[best[jx]].first);
            }
        }
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd;
        std::unordered_map<int64_t, std::vector<int32_t>> assigned;  // process -> keys (a set)
        std::unordered_map<int64_t, std::unordered_map<int32_t, int64_t>> position;
        std::unordered_map<int64_t, char> fresh;
        std::set<std::pair<int64_t, int32_t>> reported_pk;
        for (const Op& op : ops) {
            if (!op.completed) continue;
            if (op.f == F_ASSIGN && (op.type == T_OK || op.type == T_INFO)) {
                fresh[op.process] = 1;
                std::vector<int32_t>& as = assigned[op.process];
                as.assign(akeys.begin() + op.kb, akeys.begin() + op.ke);
                std::sort(as.begin(), as.end());
                as.erase(std::unique(as.begin(), as.end()), as.end());
                auto& pos = position[op.process];
                for (auto it = pos.begin(); it != pos.end();)
                    it = (op.seek || !std::binary_search(as.begin(), as.end(), it->first)) ? pos.erase(it)
                                                                                          : std::next(it);
                if (op.seek)
                    for (int32_t k : as) pos[k] = -1;
                continue;
            }
            if (op.f == F_SUBSCRIBE) {
                assigned[op.process].clear();
                continue;
            }
            if ((op.f != F_POLL && op.f != F_TXN) || op.npoll == 0 || op.type != T_OK) continue;
            reads_of(op, rd);
            bool first_poll = fresh.count(op.process) && fresh[op.process];
            fresh[op.process] = 0;
            bool any = false;
            for (auto& r : rd)
                if (!r.second.empty()) any = true;
            if (any) {
                for (auto& r : rd) {
                    int32_t top = -1;
                    if (keys[static_cast<size_t>(r.first)].logged)
                        for (int64_t v : r.second) top = std::max(top, first_of(r.first, v));
                    if (top >= 0) position[op.process][r.first] = top;
                }
                continue;
            }
            if (op.invoke_time < end + bound || first_poll) continue;
            auto ai = assigned.find(op.process);
            if (ai == assigned.end()) continue;
            auto& pos = position[op.process];
            std::vector<int32_t> by_name(ai->second);
            std::sort(by_name.begin(), by_name.end(), [&](int32_t a, int32_t b) { return kname(a) < kname(b); });
            for (int32_t key : by_name) {
                auto pi = pos.find(key);
                if (pi == pos.end() || !has_suffix[static_cast<size_t>(key)] || reported_pk.count({op.process, key}))
                    continue;
                const Suffix& s = suffix[static_cast<size_t>(key)];
                size_t jx = static_cast<size_t>(
                    std::upper_bound(s.idx.begin(), s.idx.end(), static_cast<int32_t>(pi->second)) - s.idx.begin());
                if (jx < s.idx.size() && s.t[jx] <= op.invoke_time - bound) {
                    reported_pk.insert({op.process, key});
                    int64_t v = keys[static_cast<size_t>(key)].by_index[static_cast<size_t>(s.at[jx])];
                    ValInfo* vi = keys[static_cast<size_t>(key)].find(v);
                    int64_t acked_t = s.t[jx];
                    add("stale-read", false, [&] {
                        py::dict ev;
                        ev["key"] = kname(key);
                        ev["value"] = v;
                        std::vector<int64_t> o;
                        if (vi && vi->writer >= 0) o.push_back(ops[static_cast<size_t>(vi->writer)].index);
                        o.push_back(op.index);
                        ev["ops"] = py::cast(o);
                        ev["explanation"] = "op " + std::to_string(op.index) + " (process " + std::to_string(op.process) +
                                            ") polled " + kname(key) + " " + fmt1(static_cast<double>(op.invoke_time - end) / 1e9) +
                                            " s after the faults ended and got nothing, although " + std::to_string(v) +
                                            ", acknowledged " + fmt1(static_cast<double>(op.invoke_time - acked_t) / 1e9) +
                                            " s earlier, lies beyond its position: acknowledged data was not readable "
                                            "within the " + std::to_string(staleness_bound_ms) + " ms staleness bound";
                        return ev;
                    });
                }
            }
        }
    }

    void check_nonatomic() {
        // committed transactions' values of one key, more than one, with known positions
        struct TV {
            int64_t op;
            int32_t key;
            std::vector<std::pair<int32_t, int64_t>> vs;
        };
        std::vector<TV> txn_values;
        std::vector<std::pair<int32_t, std::vector<std::pair<int32_t, int64_t>>>> by_key;
        for (const Op& op : ops) {
            if (op.type != T_OK || op.f != F_TXN) continue;
            by_key.clear();
            for (uint32_t s = op.sb; s < op.se; ++s) {
                int32_t i = first_of(sends[s].key, sends[s].v);
                if (i < 0) continue;
                std::vector<std::pair<int32_t, int64_t>>* vs = nullptr;
                for (auto& kv : by_key)
                    if (kv.first == sends[s].key) vs = &kv.second;
                if (!vs) {
                    by_key.emplace_back(sends[s].key, std::vector<std::pair<int32_t, int64_t>>());
                    vs = &by_key.back().second;
                }
                vs->emplace_back(i, sends[s].v);
            }
            for (auto& kv : by_key)
                if (kv.second.size() > 1) txn_values.push_back(TV{op.index, kv.first, kv.second});
        }
        if (txn_values.empty()) return;
        // (process, key) -> values read, highest and lowest index read
        struct PK {
            std::vector<int64_t> read;
            int32_t hi = -1, lo = std::numeric_limits<int32_t>::max();
            int64_t hi_op = -1;
        };
        std::unordered_map<int64_t, std::unordered_map<int32_t, PK>> read;
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd;
        for (const Op& op : ops) {
            if (!op.completed || op.type == T_INFO) continue;
            reads_of(op, rd);
            for (auto& r : rd) {
                if (!keys[static_cast<size_t>(r.first)].logged) continue;
                for (int64_t v : r.second) {
                    int32_t i = first_of(r.first, v);
                    if (i < 0) continue;
                    PK& pk = read[op.process][r.first];
                    pk.read.push_back(v);
                    if (i > pk.hi) {
                        pk.hi = i;
                        pk.hi_op = op.index;
                    }
                    pk.lo = std::min(pk.lo, i);
                }
            }
        }
        // (process, key) in the order of Python's repr of the pair
        std::vector<std::tuple<std::string, int64_t, int32_t>> order;
        for (auto& pr : read)
            for (auto& kr : pr.second) {
                const std::string& name = kname(kr.first);
                for (char c : name)
                    if (c == '\'' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                        fallback("a key whose repr the fast path does not write");
                order.emplace_back("(" + std::to_string(pr.first) + ", '" + name + "')", pr.first, kr.first);
            }
        std::sort(order.begin(), order.end());
        // each key's transactions, in their order (Python's by_key_txn)
        std::vector<std::vector<uint32_t>> txns_of(keys.size());
        for (uint32_t x = 0; x < txn_values.size(); ++x)
            txns_of[static_cast<size_t>(txn_values[x].key)].push_back(x);
        for (auto& ent : order) {
            int64_t process = std::get<1>(ent);
            int32_t key = std::get<2>(ent);
            PK& pk = read[process][key];
            std::sort(pk.read.begin(), pk.read.end());
            for (uint32_t x : txns_of[static_cast<size_t>(key)]) {
                const TV& t = txn_values[x];
                poll_signals();
                std::vector<int64_t> got, missing;
                int32_t mn = std::numeric_limits<int32_t>::max(), mx = -1;
                for (auto& iv : t.vs) {
                    (std::binary_search(pk.read.begin(), pk.read.end(), iv.second) ? got : missing).push_back(iv.second);
                    mn = std::min(mn, iv.first);
                    mx = std::max(mx, iv.first);
                }
                if (got.empty() || got.size() == t.vs.size()) continue;
                if (pk.lo <= mn && pk.hi > mx) {
                    add("nonatomic-read", false, [&] {
                        py::dict ev;
                        ev["key"] = kname(key);
                        ev["values"] = py::cast(by_repr(got));
                        ev["missing"] = py::cast(by_repr(missing));
                        ev["ops"] = py::cast(std::vector<int64_t>{t.op, pk.hi_op});
                        ev["explanation"] = "process " + std::to_string(process) + " read " + repr(got) +
                                            " of transaction op " + std::to_string(t.op) + " from " + kname(key) +
                                            " and later positions (op " + std::to_string(pk.hi_op) + "), but never its " +
                                            repr(missing) + ": the transaction was not visible all at once";
                        return ev;
                    });
                }
            }
        }
    }

    // ---------------------------------------------------------------- cycles

    // the typed graph of properties/cycles.py's _Graph: adjacency in insertion order
    std::vector<std::vector<std::pair<int32_t, uint8_t>>> adj;
    std::vector<int32_t> adj_order;
    std::vector<char> in_adj;
    int64_t n_edges = 0;
    std::vector<uint32_t> nodes;  // node id -> op position
    int32_t n_nodes = 0;

    void link(int32_t u, int32_t v, int t) {
        if (u == v) return;
        auto& d = adj[static_cast<size_t>(u)];
        if (!in_adj[static_cast<size_t>(u)]) {
            in_adj[static_cast<size_t>(u)] = 1;
            adj_order.push_back(u);
        }
        for (auto& e : d)
            if (e.first == v) {
                e.second = static_cast<uint8_t>(e.second | t);
                return;
            }
        d.emplace_back(v, static_cast<uint8_t>(t));
        ++n_edges;
    }

    void build() {
        for (uint32_t p = 0; p < ops.size(); ++p) {
            const Op& op = ops[p];
            if (txn_f(op.f) && op.completed && (op.type == T_OK || committed[p])) nodes.push_back(p);
        }
        n_nodes = static_cast<int32_t>(nodes.size());
        size_t total = nodes.size() * 2;
        adj.assign(total, {});
        in_adj.assign(total, 0);
        for (int32_t i = 0; i < n_nodes; ++i) {
            const Op& op = ops[nodes[static_cast<size_t>(i)]];
            for (uint32_t s = op.sb; s < op.se; ++s) keys[static_cast<size_t>(sends[s].key)].get(sends[s].v).node = i;
        }
        auto writer_id = [&](int32_t key, int64_t v) -> int32_t {
            ValInfo* vi = keys[static_cast<size_t>(key)].find(v);
            return vi ? vi->node : -1;
        };
        if (ww_deps) {
            for (int32_t key : key_order) {
                KeyState& k = keys[static_cast<size_t>(key)];
                int32_t prev = -1;
                for (int64_t v : k.by_index) {
                    int32_t w = writer_id(key, v);
                    if (w >= 0 && prev >= 0) link(prev, w, WW);
                    prev = w;
                }
            }
        }
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd;
        for (int32_t i = 0; i < n_nodes; ++i) {
            const Op& op = ops[nodes[static_cast<size_t>(i)]];
            if (op.type != T_OK || op.pb == op.pe) continue;
            poll_signals();
            reads_of(op, rd);
            for (auto& r : rd) {
                KeyState& k = keys[static_cast<size_t>(r.first)];
                int32_t top = -1;
                for (int64_t v : r.second) {
                    int32_t w = writer_id(r.first, v);
                    if (w >= 0) link(w, i, WR);
                    if (k.logged) top = std::max(top, first_of(r.first, v));
                }
                if (k.logged && top >= 0 && static_cast<size_t>(top) + 1 < k.by_index.size()) {
                    int32_t w = writer_id(r.first, k.by_index[static_cast<size_t>(top) + 1]);
                    if (w >= 0) link(i, w, RW);
                }
            }
        }
        std::unordered_map<int64_t, int32_t> last_of;
        for (int32_t i = 0; i < n_nodes; ++i) {
            int64_t proc = ops[nodes[static_cast<size_t>(i)]].process;
            auto it = last_of.find(proc);
            if (it != last_of.end()) {
                link(it->second, i, PROC);
                it->second = i;
            } else {
                last_of.emplace(proc, i);
            }
        }
        std::vector<std::pair<int64_t, int32_t>> invokes;
        invokes.reserve(nodes.size());
        for (int32_t i = 0; i < n_nodes; ++i) invokes.emplace_back(ops[nodes[static_cast<size_t>(i)]].invoke_time, i);
        std::sort(invokes.begin(), invokes.end());
        int32_t base = n_nodes;
        for (size_t j = 0; j < invokes.size(); ++j) {
            link(base + static_cast<int32_t>(j), invokes[j].second, RT);
            if (j + 1 < invokes.size()) link(base + static_cast<int32_t>(j), base + static_cast<int32_t>(j) + 1, RT);
        }
        for (int32_t i = 0; i < n_nodes; ++i) {
            int64_t t = ops[nodes[static_cast<size_t>(i)]].time;
            size_t j = static_cast<size_t>(
                std::upper_bound(invokes.begin(), invokes.end(), t,
                                 [](int64_t x, const std::pair<int64_t, int32_t>& e) { return x < e.first; }) -
                invokes.begin());
            if (j < invokes.size()) link(i, base + static_cast<int32_t>(j), RT);
        }
    }

    // _Graph.components: the iterative Tarjan of properties/cycles.py, in its order
    std::vector<std::vector<int32_t>> components(int mask) {
        size_t total = adj.size();
        std::vector<int32_t> index(total, -1), low(total, -1);
        std::vector<char> on_stack(total, 0);
        std::vector<int32_t> stack;
        std::vector<std::vector<int32_t>> out;
        int32_t counter = 0;
        std::vector<std::pair<int32_t, size_t>> work;
        for (int32_t root : adj_order) {
            if (index[static_cast<size_t>(root)] >= 0) continue;
            poll_signals();
            index[static_cast<size_t>(root)] = low[static_cast<size_t>(root)] = counter++;
            stack.push_back(root);
            on_stack[static_cast<size_t>(root)] = 1;
            work.emplace_back(root, 0);
            while (!work.empty()) {
                int32_t node = work.back().first;
                size_t pos = work.back().second;
                const auto& a = adj[static_cast<size_t>(node)];
                bool advanced = false;
                while (pos < a.size()) {
                    int32_t w = a[pos].first;
                    int t = a[pos].second;
                    ++pos;
                    if (!(t & mask)) continue;
                    if (index[static_cast<size_t>(w)] < 0) {
                        index[static_cast<size_t>(w)] = low[static_cast<size_t>(w)] = counter++;
                        stack.push_back(w);
                        on_stack[static_cast<size_t>(w)] = 1;
                        work.back().second = pos;
                        work.emplace_back(w, 0);
                        advanced = true;
                        break;
                    }
                    if (on_stack[static_cast<size_t>(w)] && index[static_cast<size_t>(w)] < low[static_cast<size_t>(node)])
                        low[static_cast<size_t>(node)] = index[static_cast<size_t>(w)];
                }
                if (advanced) continue;
                work.pop_back();
                if (!work.empty()) {
                    int32_t parent = work.back().first;
                    if (low[static_cast<size_t>(node)] < low[static_cast<size_t>(parent)])
                        low[static_cast<size_t>(parent)] = low[static_cast<size_t>(node)];
                }
                if (low[static_cast<size_t>(node)] == index[static_cast<size_t>(node)]) {
                    std::vector<int32_t> comp;
                    while (true) {
                        int32_t w = stack.back();
                        stack.pop_back();
                        on_stack[static_cast<size_t>(w)] = 0;
                        comp.push_back(w);
                        if (w == node) break;
                    }
                    if (comp.size() > 1) out.push_back(std::move(comp));
                }
            }
        }
        return out;
    }

    // a networkx DiGraph as the searches see it: nodes in insertion order, successors in
    // insertion order, each edge with its type
    struct G {
        std::vector<int32_t> order;
        std::vector<std::vector<std::pair<int32_t, uint8_t>>> succ;  // by node id
        std::vector<char> has;
        int edge(int32_t x, int32_t y) const {
            for (auto& e : succ[static_cast<size_t>(x)])
                if (e.first == y) return e.second;
            throw std::logic_error("no such edge");
        }
    };

    // nx_graph(comps, mask): each component's nodes in the order of Python's set(comp)
    G nx_graph(const std::vector<std::vector<int32_t>>& comps, int mask) {
        G g;
        size_t total = adj.size();
        g.succ.assign(total, {});
        g.has.assign(total, 0);
        std::vector<int32_t> comp_of(total, -1);
        for (size_t c = 0; c < comps.size(); ++c) {
            for (int32_t u : comps[c]) comp_of[static_cast<size_t>(u)] = static_cast<int32_t>(c);
            py::list l(comps[c].size());
            for (size_t q = 0; q < comps[c].size(); ++q) l[q] = py::int_(comps[c][q]);
            py::object s = py::reinterpret_steal<py::object>(PySet_New(l.ptr()));
            if (!s) throw py::error_already_set();
            for (py::handle h : s) {
                int32_t u = h.cast<int32_t>();
                g.order.push_back(u);
                g.has[static_cast<size_t>(u)] = 1;
            }
        }
        for (size_t c = 0; c < comps.size(); ++c)
            for (int32_t u : comps[c])
                for (auto& e : adj[static_cast<size_t>(u)])
                    if ((e.second & mask) && comp_of[static_cast<size_t>(e.first)] == static_cast<int32_t>(c))
                        g.succ[static_cast<size_t>(u)].emplace_back(e.first, static_cast<uint8_t>(e.second & mask));
        return g;
    }

    // h = the edges of g with a type in `allowed`, added in g.edges order
    G restrict(const G& g, int allowed) {
        G h;
        size_t total = g.succ.size();
        h.succ.assign(total, {});
        h.has.assign(total, 0);
        for (int32_t u : g.order)
            for (auto& e : g.succ[static_cast<size_t>(u)]) {
                if (!(e.second & allowed)) continue;
                if (!h.has[static_cast<size_t>(u)]) {
                    h.has[static_cast<size_t>(u)] = 1;
                    h.order.push_back(u);
                }
                if (!h.has[static_cast<size_t>(e.first)]) {
                    h.has[static_cast<size_t>(e.first)] = 1;
                    h.order.push_back(e.first);
                }
                h.succ[static_cast<size_t>(u)].emplace_back(e.first, static_cast<uint8_t>(e.second & allowed));
            }
        return h;
    }

    // networkx.strongly_connected_components(h), in its order (Tarjan with Nuutila's changes)
    std::vector<std::vector<int32_t>> nx_sccs(const G& h) {
        size_t total = h.succ.size();
        std::vector<int64_t> preorder(total, 0), lowlink(total, 0);
        std::vector<char> found(total, 0);
        std::vector<size_t> nbr(total, 0);
        std::vector<int32_t> scc_queue, queue;
        std::vector<std::vector<int32_t>> out;
        int64_t i = 0;
        for (int32_t source : h.order) {
            if (found[static_cast<size_t>(source)]) continue;
            poll_signals();
            queue.assign(1, source);
            while (!queue.empty()) {
                int32_t v = queue.back();
                size_t vi = static_cast<size_t>(v);
                if (!preorder[vi]) preorder[vi] = ++i;
                bool done = true;
                const auto& s = h.succ[vi];
                while (nbr[vi] < s.size()) {
                    int32_t w = s[nbr[vi]++].first;
                    if (!preorder[static_cast<size_t>(w)]) {
                        queue.push_back(w);
                        done = false;
                        break;
                    }
                }
                if (!done) continue;
                lowlink[vi] = preorder[vi];
                for (auto& e : s) {
                    size_t wi = static_cast<size_t>(e.first);
                    if (found[wi]) continue;
                    if (preorder[wi] > preorder[vi]) lowlink[vi] = std::min(lowlink[vi], lowlink[wi]);
                    else lowlink[vi] = std::min(lowlink[vi], preorder[wi]);
                }
                queue.pop_back();
                if (lowlink[vi] == preorder[vi]) {
                    std::vector<int32_t> scc{v};
                    while (!scc_queue.empty() && preorder[static_cast<size_t>(scc_queue.back())] > preorder[vi]) {
                        scc.push_back(scc_queue.back());
                        scc_queue.pop_back();
                    }
                    for (int32_t x : scc) found[static_cast<size_t>(x)] = 1;
                    out.push_back(std::move(scc));
                } else {
                    scc_queue.push_back(v);
                }
            }
        }
        return out;
    }

    // BFS state reused between path searches
    std::vector<int32_t> prev_of;
    std::vector<uint32_t> seen_gen;
    uint32_t gen = 0;
    std::vector<int32_t> in_comp;  // node -> component stamp
    int32_t comp_stamp = 0;

    bool cycle_through(const G& h, int32_t u, int32_t v, int allowed, std::vector<int32_t>& cyc) {
        ++gen;
        std::deque<int32_t> q;
        seen_gen[static_cast<size_t>(v)] = gen;
        prev_of[static_cast<size_t>(v)] = -1;
        q.push_back(v);
        while (!q.empty()) {
            int32_t x = q.front();
            q.pop_front();
            poll_signals();
            const auto& s = h.succ[static_cast<size_t>(x)];
            if (budget.spend(1 + static_cast<int64_t>(s.size()))) return false;
            if (x == u) {
                std::vector<int32_t> path{u};
                while (prev_of[static_cast<size_t>(path.back())] != -1) path.push_back(prev_of[static_cast<size_t>(path.back())]);
                std::reverse(path.begin(), path.end());
                if (path[0] != v) return false;
                cyc.clear();
                cyc.push_back(u);
                cyc.insert(cyc.end(), path.begin(), path.end() - 1);
                return true;
            }
            for (auto& e : s) {
                size_t y = static_cast<size_t>(e.first);
                if ((e.second & allowed) && seen_gen[y] != gen && in_comp[y] == comp_stamp) {
                    seen_gen[y] = gen;
                    prev_of[y] = x;
                    q.push_back(e.first);
                }
            }
        }
        return false;
    }

    enum Accept { ACCEPT_ANY, ACCEPT_HAS_WW, ACCEPT_TWO_RW };

    bool accept(const std::vector<int32_t>& cyc, const G& h, Accept a) {
        if (a == ACCEPT_ANY) return true;
        int count = 0;
        for (size_t q = 0; q < cyc.size(); ++q) {
            int t = h.edge(cyc[q], cyc[(q + 1) % cyc.size()]);
            if (a == ACCEPT_HAS_WW && (t & WW) && !(t & WR)) return true;
            if (a == ACCEPT_TWO_RW && (t & RW) && !(t & (WW | WR))) ++count;
        }
        return a == ACCEPT_TWO_RW && count > 1;
    }

    std::vector<std::vector<int32_t>> search(const G& g, int allowed, int required, Accept acc, int path,
                                             int tries) {
        G h = restrict(g, allowed);
        std::vector<std::vector<int32_t>> found;
        std::vector<int32_t> cyc;
        for (auto& comp : nx_sccs(h)) {
            if (comp.size() < 2) continue;
            ++comp_stamp;
            for (int32_t x : comp) in_comp[static_cast<size_t>(x)] = comp_stamp;
            std::sort(comp.begin(), comp.end());
            int attempts = 0;
            bool done = false;
            for (int32_t u : comp) {
                for (auto& e : h.succ[static_cast<size_t>(u)]) {
                    if (budget.spend()) return found;
                    poll_signals();
                    if (in_comp[static_cast<size_t>(e.first)] != comp_stamp || !(e.second & required)) continue;
                    ++attempts;
                    if (tries > 0 && attempts > tries) {
                        done = true;
                        break;
                    }
                    bool ok = cycle_through(h, u, e.first, path ? path : allowed, cyc);
                    if (ok && accept(cyc, h, acc)) {
                        found.push_back(cyc);
                        done = true;
                        break;
                    }
                }
                if (done) break;
            }
        }
        return found;
    }

    static std::vector<int> edge_types(const std::vector<int32_t>& cyc, const G& g, std::initializer_list<int> prefer) {
        std::vector<int> out;
        for (size_t q = 0; q < cyc.size(); ++q) {
            int t = g.edge(cyc[q], cyc[(q + 1) % cyc.size()]);
            int got = 0;
            for (int p : prefer)
                if (t & p) {
                    got = p;
                    break;
                }
            if (!got) throw std::logic_error("an edge of none of the preferred types");
            out.push_back(got);
        }
        return out;
    }

    py::dict step(const Op& x, const Op& y, int t) {
        py::dict st;
        st["from"] = x.index;
        st["to"] = y.index;
        st["type"] = type_name(t);
        std::vector<std::pair<int32_t, std::vector<int64_t>>> rd;
        auto sends_has = [&](const Op& o, int32_t key, int64_t v) {
            for (uint32_t s = o.sb; s < o.se; ++s)
                if (sends[s].key == key && sends[s].v == v) return true;
            return false;
        };
        auto sorted_reads = [&](const Op& o) {
            reads_of(o, rd);
            std::sort(rd.begin(), rd.end(), [&](const auto& a, const auto& b) { return kname(a.first) < kname(b.first); });
        };
        if (t == WW) {
            for (uint32_t s = x.sb; s < x.se; ++s) {
                int32_t key = sends[s].key;
                KeyState& k = keys[static_cast<size_t>(key)];
                if (!k.logged) continue;
                int32_t i = first_of(key, sends[s].v);
                if (i >= 0 && static_cast<size_t>(i) + 1 < k.by_index.size() &&
                    sends_has(y, key, k.by_index[static_cast<size_t>(i) + 1])) {
                    int64_t nv = k.by_index[static_cast<size_t>(i) + 1];
                    st["key"] = kname(key);
                    st["value"] = sends[s].v;
                    st["next_value"] = nv;
                    st["text"] = "op " + std::to_string(x.index) + " sent " + std::to_string(sends[s].v) + " to " +
                                 kname(key) + " just before op " + std::to_string(y.index) + " sent " + std::to_string(nv);
                    return st;
                }
            }
        } else if (t == WR) {
            sorted_reads(y);
            for (auto& r : rd)
                for (int64_t v : r.second)
                    if (sends_has(x, r.first, v)) {
                        st["key"] = kname(r.first);
                        st["value"] = v;
                        st["text"] = "op " + std::to_string(x.index) + " sent " + std::to_string(v) + " to " +
                                     kname(r.first) + ", which op " + std::to_string(y.index) + " read";
                        return st;
                    }
        } else if (t == RW) {
            sorted_reads(x);
            for (auto& r : rd) {
                KeyState& k = keys[static_cast<size_t>(r.first)];
                if (!k.logged || r.second.empty()) continue;
                int32_t top = -1;
                for (int64_t v : r.second) top = std::max(top, first_of(r.first, v));
                if (top >= 0 && static_cast<size_t>(top) + 1 < k.by_index.size() &&
                    sends_has(y, r.first, k.by_index[static_cast<size_t>(top) + 1])) {
                    int64_t cur = k.by_index[static_cast<size_t>(top)], nv = k.by_index[static_cast<size_t>(top) + 1];
                    st["key"] = kname(r.first);
                    st["value"] = cur;
                    st["next_value"] = nv;
                    st["text"] = "op " + std::to_string(x.index) + " read " + kname(r.first) + " only up to " +
                                 std::to_string(cur) + ", missing " + std::to_string(nv) + " written by op " +
                                 std::to_string(y.index);
                    return st;
                }
            }
        } else if (t == PROC) {
            st["text"] = "op " + std::to_string(x.index) + " came before op " + std::to_string(y.index) + " in process " +
                         std::to_string(x.process);
            return st;
        }
        st["type"] = "realtime";
        st["text"] = "op " + std::to_string(x.index) + " completed before op " + std::to_string(y.index) + " was invoked";
        return st;
    }

    void report(const std::string& kind, const std::vector<int32_t>& cyc, const std::vector<int>& types, bool allowed,
                const std::string& why) {
        Reported& r = reported(kind, allowed);
        ++r.count;
        if (r.count > SHOWN || static_cast<int64_t>(py::len(r.items)) >= MAX_REPORTED) return;
        // _explain: steps between real ops, time nodes folded into one realtime step
        size_t L = cyc.size();
        size_t start = 0;
        while (cyc[start] >= n_nodes) ++start;
        std::vector<std::pair<int32_t, int>> real;
        for (size_t q = 0; q < L; ++q) real.emplace_back(cyc[(start + q) % L], types[(start + q) % L]);
        py::list steps;
        std::vector<int64_t> opsv;
        std::string texts;
        size_t j = 0;
        py::list cycle;
        while (j < L) {
            int32_t i = real[j].first;
            int t = real[j].second;
            size_t k = j + 1;
            while (k < L && real[k].first >= n_nodes) ++k;
            int32_t nxt = k < L ? real[k].first : real[0].first;
            const Op& x = ops[nodes[static_cast<size_t>(i)]];
            const Op& y = ops[nodes[static_cast<size_t>(nxt)]];
            opsv.push_back(x.index);
            py::dict st = step(x, y, k == j + 1 ? t : RT);
            if (!texts.empty()) texts += "; ";
            texts += st["text"].cast<std::string>();
            cycle.append(st["from"]);
            steps.append(st);
            j = k;
        }
        std::sort(opsv.begin(), opsv.end());
        opsv.erase(std::unique(opsv.begin(), opsv.end()), opsv.end());
        py::dict ev;
        ev["cycle"] = cycle;
        ev["steps"] = steps;
        ev["ops"] = py::cast(opsv);
        ev["explanation"] = "a cycle of " + std::to_string(py::len(steps)) + " ops: " + texts + ". " + why;
        r.items.append(ev);
    }

    void check_cycles() {
        build();
        size_t total = adj.size();
        prev_of.assign(total, -1);
        seen_gen.assign(total, 0);
        in_comp.assign(total, 0);
        cycle_stats["graph_nodes"] = n_nodes;
        cycle_stats["graph_edges"] = n_edges;
        int data = WW | WR;
        auto comps = components(data | PROC | RT);
        int64_t cyclic = 0;
        for (auto& c : comps) cyclic += static_cast<int64_t>(c.size());
        cycle_stats["cyclic_nodes"] = cyclic;
        if (!comps.empty()) {
            G dg = nx_graph(comps, data | PROC | RT);
            for (auto& cyc : search(dg, WR, WR, ACCEPT_ANY, 0, 0))
                report("G1c", cyc, std::vector<int>(cyc.size(), WR), false,
                       "Each op read a value the previous one wrote: a read-only dependency cycle, "
                       "impossible when reads see only committed data");
            for (auto& cyc : search(dg, WW | WR, WR, ACCEPT_HAS_WW, 0, TRIES))
                report("G1c", cyc, edge_types(cyc, dg, {WR, WW}), true,
                       "Write-write and write-read dependencies form a cycle; Kafka does not isolate "
                       "transactions' writes from each other, so it is allowed");
            for (auto& cyc : search(dg, WW, WW, ACCEPT_ANY, 0, 0))
                report("G0", cyc, std::vector<int>(cyc.size(), WW), true,
                       "The ops' writes land in opposite orders in different partitions; Kafka does "
                       "not isolate writes, so it is allowed");
            for (int extra : {PROC, RT}) {
                std::string name = extra == PROC ? "process" : "realtime";
                for (auto& cyc : search(dg, WR | extra, extra, ACCEPT_ANY, 0, 0))
                    report("G1c-" + name, cyc, edge_types(cyc, dg, {WR, extra}), false,
                           "The cycle needs " + name + " order: an op observed a write that, by " + name +
                               " order, it could not have seen yet");
                for (auto& cyc : search(dg, data | extra, extra, ACCEPT_HAS_WW, 0, TRIES)) {
                    auto types = edge_types(cyc, dg, {WR, WW, extra});
                    bool has_wr = std::find(types.begin(), types.end(), WR) != types.end();
                    report(std::string(has_wr ? "G1c" : "G0") + "-" + name, cyc, types, true,
                           "The cycle needs " + name + " order; allowed, since it includes write-write "
                           "dependencies");
                }
            }
        }
        if (budget.out()) {
            cycle_stats["budget_exhausted"] = true;
            cycle_stats["budget_reason"] = py::none();  // filled in by Python (Budget.explain)
            cycle_stats["cycle_steps"] = budget.used;
            return;
        }
        comps = components(WW | WR | RW);
        cyclic = 0;
        for (auto& c : comps) cyclic += static_cast<int64_t>(c.size());
        cycle_stats["rw_cyclic_nodes"] = cyclic;
        if (!comps.empty()) {
            G rg = nx_graph(comps, WW | WR | RW);
            for (auto& cyc : search(rg, WW | WR | RW, RW, ACCEPT_ANY, WW | WR, TRIES))
                report("G-single", cyc, edge_types(cyc, rg, {RW, WR, WW}), true,
                       "An op saw some of another op's writes but missed a later one (read skew); "
                       "Kafka does not isolate reads (markers land per partition and a fetch may "
                       "stop anywhere), so it is allowed");
            for (auto& cyc : search(rg, WW | WR | RW, RW, ACCEPT_TWO_RW, 0, TRIES))
                report("G2", cyc, edge_types(cyc, rg, {WR, WW, RW}), true,
                       "Anti-dependencies form a cycle (each op missed a write of the next); Kafka "
                       "does not serialise reads, so it is allowed");
        }
        cycle_stats["cycle_steps"] = budget.used;
        if (budget.out()) {
            cycle_stats["budget_exhausted"] = true;
            cycle_stats["budget_reason"] = py::none();
        }
    }

    py::dict result() {
        py::dict out;
        py::list reps;
        for (auto& r : reports) reps.append(py::make_tuple(r.first.first, r.first.second, r.second.count, r.second.items));
        out["reports"] = reps;
        out["unread"] = unread;
        out["cycles"] = cycle_stats;
        out["budget_used"] = budget.used;
        out["budget_reason"] = budget.reason == 0 ? "" : (budget.reason == 1 ? "steps" : "time");
        int64_t client = 0, ok = 0, fail = 0, info = 0;
        for (const Op& op : ops) {
            if (!op.completed) continue;
            ++client;
            if (op.type == T_OK) ++ok;
            else if (op.type == T_FAIL) ++fail;
            else if (op.type == T_INFO) ++info;
        }
        py::dict stats;
        stats["ops"] = n_lines;
        stats["client_ops"] = client;
        stats["ok"] = ok;
        stats["fail"] = fail;
        stats["info"] = info;
        stats["keys"] = static_cast<int64_t>(key_order.size());
        stats["nemesis_ops"] = static_cast<int64_t>(nemesis.size());
        out["stats"] = stats;
        py::list fs;
        for (auto& f : nemesis_fs) fs.append(f);
        out["nemesis_fs"] = fs;
        return out;
    }
};

// check(path, text, ww_deps, staleness, staleness_bound_ms, cycle_steps, cycle_seconds) -> dict | str
py::object check(py::object path, py::object text, bool ww_deps, bool staleness, int64_t staleness_bound_ms,
                 int64_t cycle_steps, double cycle_seconds, bool weak_acks, bool final_read, int64_t final_start,
                 bool final_reached_end, std::vector<std::string> final_ends, bool idempotence,
                 std::vector<std::string> tcp_breaking, bool precommitted_allowed,
                 std::vector<std::string> final_end_values, std::string final_bound) {
    Checker c;
    c.final_end_values = std::move(final_end_values);
    c.final_bound = std::move(final_bound);
    c.precommitted_allowed = precommitted_allowed;
    c.weak_acks = weak_acks;
    c.final_read = final_read;
    c.final_start = final_start;
    c.final_reached_end = final_reached_end;
    c.final_ends = std::move(final_ends);
    c.idempotence = idempotence;
    c.tcp_breaking = std::move(tcp_breaking);
    c.ww_deps = ww_deps;
    c.staleness = staleness;
    c.staleness_bound_ms = staleness_bound_ms;
    c.budget.steps = cycle_steps;
    // NaN never expires (as Python's comparisons with it), a negative limit at once
    double limit_s = std::isnan(cycle_seconds) ? 1e12 : std::clamp(cycle_seconds, 0.0, 1e12);
    c.budget.deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(limit_s * 1e6));
    try {
        if (!path.is_none()) {
            c.read_file(path.cast<std::string>());
        } else {
            std::string_view t = text.cast<std::string_view>();
            c.read_text(t.data(), t.data() + t.size());
        }
        c.finish_reading();
        c.analyse();
        c.check_plain();
        c.check_cycles();
        return c.result();
    } catch (const Fallback& f) {
        return py::str("fallback: " + f.why);
    }
}

}  // namespace

PYBIND11_MODULE(_fastcheck, m) {
    m.doc() = "the history checker's hot path in C++ (see properties/checker.py, engine 'fast')";
    m.def("check", &check, py::arg("path"), py::arg("text"), py::arg("ww_deps"), py::arg("staleness"),
          py::arg("staleness_bound_ms"), py::arg("cycle_steps"), py::arg("cycle_seconds"), py::arg("weak_acks"),
          py::arg("final_read"), py::arg("final_start"), py::arg("final_reached_end"), py::arg("final_ends"),
          py::arg("idempotence"), py::arg("tcp_breaking"), py::arg("precommitted_allowed"),
          py::arg("final_end_values"), py::arg("final_bound"));
}
