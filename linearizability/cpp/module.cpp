// Python binding of the C++ checker: linearizability._porcupine.check(...).
//
// The Python side (linearizability/checker.py) partitions the history and encodes each
// operation as a tuple; here the tuples become typed operations, every partition gets its own
// Search, and a few threads interleave the searches in slices (the GIL released) until each is
// decided, one is illegal (which stops the rest), the deadline passes or the memory cap is hit.
// A partition that spends its budget of iterations (work, so the verdict does not depend on
// how busy the machine is) stops alone, as unknown ("iterations"). The calling thread polls
// for Python signals between slices, so Ctrl-C stops the search within milliseconds.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "models.hpp"
#include "search.hpp"

namespace py = pybind11;
using namespace lin;

namespace {

struct Settings {
    double timeout_s = 0;     // <= 0: none
    int64_t bytes_max = 0;    // <= 0: no cap
    int threads = 1;
    bool partial = false;
    uint64_t slice = 4096;
    uint64_t iterations_max = 0;  // per partition; 0: none
};

struct Outcome {
    std::string verdict;      // ok, illegal, unknown
    std::string reason;       // for unknown: timeout, memory, iterations, cancelled, interrupted
    std::vector<int32_t> longest;
    int32_t blocked;
    uint64_t iterations;
    size_t cache_entries;
};

template <class Model>
struct Partition {
    Model model;
    std::vector<typename Model::Op> ops;
    std::vector<Timed> times;
};

Timed read_times(const py::tuple& t) { return Timed{t[0].cast<int64_t>(), t[1].cast<int64_t>()}; }

Partition<RegisterModel> register_partition(const py::list& ops) {
    Partition<RegisterModel> p;
    for (const py::handle& h : ops) {
        auto t = h.cast<py::tuple>();
        p.times.push_back(read_times(t));
        p.ops.push_back(RegisterModel::Op{t[2].cast<int8_t>(), t[3].cast<bool>(), t[4].cast<int64_t>(),
                                          t[5].cast<int64_t>(), t[6].cast<bool>()});
    }
    return p;
}

template <class Model>
Partition<Model> kv_partition(const py::list& ops) {
    Partition<Model> p;
    for (const py::handle& h : ops) {
        auto t = h.cast<py::tuple>();
        p.times.push_back(read_times(t));
        int32_t key = t[4].cast<int32_t>();
        if (key < 0) throw std::invalid_argument("kv: negative key index");
        KvOp op{t[2].cast<int8_t>(), t[3].cast<bool>(), key, p.model.strings.intern(t[5].cast<std::string>())};
        p.ops.push_back(op);
        if constexpr (std::is_same_v<Model, KvMapModel>) {
            p.model.keys = std::max(p.model.keys, size_t(key) + 1);
        }
    }
    return p;
}

Partition<LogModel> log_partition(const py::list& ops) {
    Partition<LogModel> p;
    std::vector<int64_t> universe;
    for (const py::handle& h : ops) {
        auto t = h.cast<py::tuple>();
        p.times.push_back(read_times(t));
        LogModel::Op op{t[2].cast<int8_t>(), -1, -1, t[4].cast<int64_t>(), t[5].cast<int64_t>(),
                        t[6].cast<std::vector<int64_t>>(), -1};
        bool known = t[3].cast<bool>();
        if (op.kind == LogModel::Append && !known) op.kind = LogModel::Noop;
        if (op.kind == LogModel::Read) {
            if (op.recs.size() % 2) throw std::invalid_argument("log: read records must be offset, value pairs");
            if (op.offset == NIL) {
                if (op.recs.empty()) op.kind = LogModel::Noop;
                else op.offset = op.recs[0];
            }
            for (size_t i = 0; i < op.recs.size(); i += 2) universe.push_back(op.recs[i]);
        }
        if (op.kind != LogModel::Noop) universe.push_back(op.offset);
        p.ops.push_back(std::move(op));
    }
    std::sort(universe.begin(), universe.end());
    universe.erase(std::unique(universe.begin(), universe.end()), universe.end());
    auto slot = [&](int64_t offset) {
        return int32_t(std::lower_bound(universe.begin(), universe.end(), offset) - universe.begin());
    };
    for (auto& op : p.ops) {
        if (op.kind == LogModel::Append) op.slot = slot(op.offset);
        if (op.kind == LogModel::Read) {
            op.from_slot = slot(op.offset);
            for (size_t i = 0; i < op.recs.size(); i += 2) op.recs[i] = slot(op.recs[i]);
            op.last_slot = op.recs.empty() ? -1 : int32_t(op.recs[op.recs.size() - 2]);
        }
    }
    p.model.resize(universe.size());
    return p;
}

const char* status_name(Status s) {
    switch (s) {
        case Status::Ok: return "ok";
        case Status::Illegal: return "illegal";
        default: return "unknown";
    }
}

template <class Model>
std::vector<Outcome> run_searches(std::vector<Partition<Model>>& parts, const Settings& settings) {
    Budget budget;
    budget.bytes_max = settings.bytes_max;
    std::vector<std::unique_ptr<SearchBase>> searches;
    for (auto& p : parts) {
        searches.push_back(make_search<Model>(std::move(p.model), std::move(p.ops), p.times, &budget, settings.partial));
    }
    using clock = std::chrono::steady_clock;
    auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                       std::chrono::duration<double>(settings.timeout_s > 0 ? settings.timeout_s : 1e9));
    std::deque<size_t> queue;
    for (size_t i = 0; i < searches.size(); ++i) queue.push_back(i);
    std::mutex mutex;
    std::string stop_reason;
    auto stop = [&](const char* reason) {
        std::lock_guard<std::mutex> lock(mutex);
        if (stop_reason.empty()) stop_reason = reason;
        budget.stop = true;
    };

    std::vector<char> spent(searches.size(), 0);  // stopped alone: its iterations ran out
    bool interrupted = false;
    auto last_poll = clock::now();
    // the calling thread (main == true) also polls Python's signal handlers between slices
    auto worker = [&](bool main) {
        for (;;) {
            size_t index;
            {
                std::lock_guard<std::mutex> lock(mutex);
                if (queue.empty() || budget.stop) return;
                index = queue.front();
                queue.pop_front();
            }
            Status s = searches[index]->run(settings.slice);
            if (s == Status::Illegal) {
                stop("cancelled");
            } else if (s == Status::Unknown) {
                stop("memory");
            } else if (s == Status::Running) {
                if (clock::now() > deadline) {
                    stop("timeout");
                }
                std::lock_guard<std::mutex> lock(mutex);
                if (settings.iterations_max > 0 && searches[index]->iterations() >= settings.iterations_max) {
                    spent[index] = 1;
                } else {
                    queue.push_back(index);
                }
            }
            if (main && clock::now() - last_poll > std::chrono::milliseconds(20)) {
                last_poll = clock::now();
                py::gil_scoped_acquire acquire;
                if (PyErr_CheckSignals() != 0) {
                    interrupted = true;  // the exception stays set; raised after the threads join
                    stop("interrupted");
                    return;
                }
            }
        }
    };
    {
        py::gil_scoped_release release;
        int threads = std::max(1, std::min<int>(settings.threads, int(searches.size())));
        std::vector<std::thread> pool;
        for (int i = 1; i < threads; ++i) pool.emplace_back(worker, false);
        worker(true);
        for (auto& t : pool) t.join();
    }
    if (interrupted) throw py::error_already_set();
    std::vector<Outcome> out;
    for (size_t i = 0; i < searches.size(); ++i) {
        auto& s = searches[i];
        Outcome o{status_name(s->status()), "", s->longest(), s->blocked(), s->iterations(), s->cache_entries()};
        if (s->status() == Status::Unknown) o.reason = "memory";
        if (s->status() == Status::Running) {
            o.verdict = "unknown";
            o.reason = spent[i] ? "iterations" : (stop_reason.empty() ? "cancelled" : stop_reason);
        }
        out.push_back(std::move(o));
    }
    return out;
}

template <class Model, class Build>
std::vector<Outcome> check_with(const py::list& partitions, const Settings& settings, Build build) {
    std::vector<Partition<Model>> parts;
    for (const py::handle& h : partitions) parts.push_back(build(h.cast<py::list>()));
    return run_searches<Model>(parts, settings);
}

py::list check(const std::string& model, const py::list& partitions, double timeout_s, int64_t bytes_max, int threads,
               bool partial, uint64_t slice, uint64_t iterations_max) {
    Settings settings{timeout_s, bytes_max, threads, partial, std::max<uint64_t>(slice, 1), iterations_max};
    std::vector<Outcome> outcomes;
    if (model == "register") {
        outcomes = check_with<RegisterModel>(partitions, settings, register_partition);
    } else if (model == "kv") {
        outcomes = check_with<KvModel>(partitions, settings, kv_partition<KvModel>);
    } else if (model == "kv-map") {
        outcomes = check_with<KvMapModel>(partitions, settings, kv_partition<KvMapModel>);
    } else if (model == "log") {
        outcomes = check_with<LogModel>(partitions, settings, log_partition);
    } else {
        throw std::invalid_argument("unknown native model: " + model);
    }
    py::list result;
    for (auto& o : outcomes) {
        py::dict d;
        d["verdict"] = o.verdict;
        d["reason"] = o.reason;
        d["longest"] = o.longest;
        d["blocked"] = o.blocked;
        d["iterations"] = o.iterations;
        d["cache_entries"] = o.cache_entries;
        result.append(d);
    }
    return result;
}

}  // namespace

PYBIND11_MODULE(_porcupine, m) {
    m.doc() = "porcupine's linearizability search in C++ (see linearizability/checker.py for the Python API)";
    m.def("check", &check, py::arg("model"), py::arg("partitions"), py::arg("timeout_s") = 0.0,
          py::arg("bytes_max") = 0, py::arg("threads") = 1, py::arg("partial") = false, py::arg("slice") = 4096,
          py::arg("iterations_max") = 0);
    m.attr("NIL") = NIL;
}
