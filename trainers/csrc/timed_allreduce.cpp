// A DDP communication hook in C++: DDP's default all-reduce (the mean of the bucket over
// the ranks), each bucket timed launch -> completion on CLOCK_MONOTONIC (Python's
// time.perf_counter on Linux). No Python runs per bucket: the spans are kept here and
// read by trainers.comm_cpp in one call when the recorder resolves its iterations.
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

namespace {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Span {
  int64_t launch_ns;
  int64_t done_ns;  // 0 until the all-reduce completes
  int64_t nbytes;
};

class SpanLog {
 public:
  size_t open(int64_t launch_ns, int64_t nbytes) {
    std::lock_guard<std::mutex> g(mu_);
    spans_.push_back({launch_ns, 0, nbytes});
    return base_ + spans_.size() - 1;
  }
  void close(size_t idx, int64_t done_ns) {
    std::lock_guard<std::mutex> g(mu_);
    if (idx >= base_ && idx - base_ < spans_.size()) spans_[idx - base_].done_ns = done_ns;
  }
  // The completed spans so far, up to the first still in flight, as [launch s, completion s,
  // bytes] (the lists the Recorder keeps); those are dropped from the log, the rest stay.
  py::list drain() {
    std::vector<Span> out;
    {
      std::lock_guard<std::mutex> g(mu_);
      size_t n = 0;
      while (n < spans_.size() && spans_[n].done_ns != 0) ++n;
      if (n == 0) return py::list();
      out.assign(spans_.begin(), spans_.begin() + n);
      spans_.erase(spans_.begin(), spans_.begin() + n);
      base_ += n;
    }
    py::list res(out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      py::list span(3);
      span[0] = py::float_(out[i].launch_ns * 1e-9);
      span[1] = py::float_(out[i].done_ns * 1e-9);
      span[2] = py::int_(out[i].nbytes);
      res[i] = span;
    }
    return res;
  }
  size_t pending() {
    std::lock_guard<std::mutex> g(mu_);
    return spans_.size();
  }

 private:
  std::mutex mu_;
  std::vector<Span> spans_;
  size_t base_ = 0;  // index of spans_[0] among every span opened
};

class TimedAllreduceHook : public c10d::CommHookInterface {
 public:
  TimedAllreduceHook(c10::intrusive_ptr<c10d::ProcessGroup> pg, std::shared_ptr<SpanLog> log,
                     int64_t delay_ns)
      : pg_(std::move(pg)), log_(std::move(log)), delay_ns_(delay_ns) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    at::Tensor& tensor = bucket.getBufferRef();
    const int64_t launch = now_ns();
    // scale by 1/world, then sum: DDP's builtin all-reduce does the same (its scaling folded
    // into the copy into the bucket, a multiplication by 1/world, which a hook gets unscaled).
    // Not gloo's AVG: on the quiet Xeon (benchmarks/overhead.py, #26) it cost ~30 us a
    // bucket more; a multiplication, not a division: the builtin's figures, and on CPU
    // faster than div_ (2x on a 100,000-element bucket on the 2-core dev machine).
    tensor.mul_(1.0 / static_cast<double>(pg_->getSize()));
    std::vector<at::Tensor> tensors = {tensor};
    c10::intrusive_ptr<c10d::Work> work = pg_->allreduce(tensors);
    // opened once launched: a launch that throws leaves no span that never completes
    // (drain stops at the first one still in flight)
    const size_t idx = log_->open(launch, static_cast<int64_t>(tensor.nbytes()));
    auto log = log_;
    const int64_t delay = bucket.isLast() ? delay_ns_ : 0;
    auto fut = work->getFuture();
    return fut->then(
        [log, idx, delay](c10::ivalue::Future& f) {
          if (delay > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(delay));
          log->close(idx, now_ns());
          return f.value();
        },
        fut->elementType());
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    return c10d::detail::parseCppCommHookResult(result);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::shared_ptr<SpanLog> log_;
  int64_t delay_ns_;
};

void install(py::object reducer, py::object process_group, std::shared_ptr<SpanLog> log, int64_t delay_ns) {
  auto* r = reducer.cast<c10d::Reducer*>();
  auto pg = process_group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
  r->register_comm_hook(std::make_unique<TimedAllreduceHook>(pg, std::move(log), delay_ns));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<SpanLog, std::shared_ptr<SpanLog>>(m, "SpanLog")
      .def(py::init<>())
      .def("drain", &SpanLog::drain)
      .def("pending", &SpanLog::pending);
  m.def("install", &install, "Register the timed all-reduce hook on a DDP reducer",
        py::arg("reducer"), py::arg("process_group"), py::arg("log"), py::arg("delay_ns") = 0);
  m.def("now", []() { return now_ns() * 1e-9; }, "This hook's clock, seconds");
}
