// blas_bench: time LibTorch float32 matmul/bmm for the shapes attnserve cares about,
// with whatever libblas.so.3 the dynamic loader picked (select it with LD_LIBRARY_PATH).
//
//   blas_bench bench [samples] [target_ms]   -> "R <shape> <us_per_call>" lines, one per sample
//   blas_bench check <out.bin>               -> writes results of shapes a, c, d2, f + error vs a naive double loop
//   blas_bench compare <a.bin> <b.bin>       -> max abs diff between two check outputs
//
// Every mode first prints which BLAS is mapped and where sgemm_ resolves.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>  // at::set_num_threads (not pulled in by ATen.h in 1.13)

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace {

void print_blas_info() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> seen;
  std::string line;
  while (std::getline(maps, line)) {
    auto pos = line.find('/');
    if (pos == std::string::npos) continue;
    std::string path = line.substr(pos);
    if (path.find("libblas") != std::string::npos || path.find("libopenblas") != std::string::npos ||
        path.find("libblis") != std::string::npos || path.find("liblapack") != std::string::npos) {
      if (seen.insert(path).second) std::printf("MAPPED %s\n", path.c_str());
    }
  }
  // The symbol LibTorch's PLT binds to is the first sgemm_ in the global lookup scope.
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
    std::printf("SGEMM %s\n", info.dli_fname);
  } else {
    std::printf("SGEMM <not found>\n");
  }
  // Which kernels did the library pick at run time? (only if the library is loaded)
  using name_fn = char* (*)();
  if (auto f = reinterpret_cast<name_fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename")))
    std::printf("OPENBLAS_CORE %s\n", f());
  // BLIS does not export its arch query from libblas.so.3; run with BLIS_ARCH_DEBUG=1 instead.
  const char* ct = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OPENBLAS_CORETYPE %s\n", ct ? ct : "<unset>");
  std::printf("THREADS %d\n", at::get_num_threads());
}

struct Shape {
  std::string name;
  at::Tensor a, b;
  bool batched;
  double flops;  // 2*B*M*N*K
};

std::vector<Shape> make_shapes() {
  at::manual_seed(1234);
  auto o = at::TensorOptions().dtype(at::kFloat);
  auto mm = [&](const char* n, int64_t m, int64_t k, int64_t nn) {
    return Shape{n, at::randn({m, k}, o), at::randn({k, nn}, o), false, 2.0 * m * k * nn};
  };
  auto bm = [&](const char* n, int64_t bs, int64_t m, int64_t k, int64_t nn) {
    return Shape{n, at::randn({bs, m, k}, o), at::randn({bs, k, nn}, o), true, 2.0 * bs * m * k * nn};
  };
  std::vector<Shape> s;
  s.push_back(mm("a_proj_256x64x192", 256, 64, 192));
  s.push_back(mm("b_proj_256x64x256", 256, 64, 256));
  s.push_back(bm("c_readout_4x64x4845x16", 4, 64, 4845, 16));
  s.push_back(bm("d_update_4x4845x64x16", 4, 4845, 64, 16));
  // Extra: (d) with the left operand as a transposed view of a (4,64,4845) tensor (no copy).
  {
    Shape t = bm("d2_update_Tview_4x4845x64x16", 4, 4845, 64, 16);
    t.a = at::randn({4, 64, 4845}, o).transpose(1, 2);
    s.push_back(t);
  }
  s.push_back(mm("e_head_32x64x260", 32, 64, 260));
  s.push_back(mm("f_square_512", 512, 512, 512));
  return s;
}

at::Tensor run(const Shape& s) { return s.batched ? at::bmm(s.a, s.b) : at::matmul(s.a, s.b); }

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

int bench(int samples, double target_ms) {
  auto shapes = make_shapes();
  volatile float sink = 0;
  for (auto& s : shapes) {
    // Warm-up: at least 3 calls and at least ~100 ms.
    double t0 = now_us();
    int warm = 0;
    while (warm < 3 || now_us() - t0 < 100e3) {
      sink = sink + run(s).data_ptr<float>()[0];
      ++warm;
    }
    double per_call = (now_us() - t0) / warm;
    int reps = std::max(1, static_cast<int>(target_ms * 1e3 / per_call));
    for (int i = 0; i < samples; ++i) {
      double t1 = now_us();
      for (int r = 0; r < reps; ++r) sink = sink + run(s).data_ptr<float>()[0];
      double us = (now_us() - t1) / reps;
      std::printf("R %s %.3f %d %.0f\n", s.name.c_str(), us, reps, s.flops);
    }
    std::fflush(stdout);
  }
  return 0;
}

// Naive double-precision product of (M,K)x(K,N) float matrices, for an accuracy baseline.
at::Tensor naive_double(const at::Tensor& a, const at::Tensor& b) {
  auto A = a.to(at::kDouble).contiguous();
  auto B = b.to(at::kDouble).contiguous();
  bool batched = A.dim() == 3;
  if (!batched) {
    A = A.unsqueeze(0);
    B = B.unsqueeze(0);
  }
  int64_t bs = A.size(0), m = A.size(1), k = A.size(2), n = B.size(2);
  auto C = at::zeros({bs, m, n}, at::kDouble);
  const double* pa = A.data_ptr<double>();
  const double* pb = B.data_ptr<double>();
  double* pc = C.data_ptr<double>();
  for (int64_t z = 0; z < bs; ++z)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        double av = pa[(z * m + i) * k + p];
        for (int64_t j = 0; j < n; ++j) pc[(z * m + i) * n + j] += av * pb[(z * k + p) * n + j];
      }
  return batched ? C : C.squeeze(0);
}

int check(const char* out) {
  auto shapes = make_shapes();
  std::ofstream f(out, std::ios::binary);
  for (auto& s : shapes) {
    if (s.name.rfind("a_", 0) != 0 && s.name.rfind("c_", 0) != 0 && s.name.rfind("d2_", 0) != 0 &&
        s.name.rfind("f_", 0) != 0)
      continue;
    auto c = run(s).contiguous();
    auto ref = naive_double(s.a, s.b);
    double err = (c.to(at::kDouble) - ref).abs().max().item<double>();
    double mag = ref.abs().max().item<double>();
    std::printf("CHECK %s max_abs_err_vs_double=%.3e max_abs_value=%.3e\n", s.name.c_str(), err, mag);
    f.write(reinterpret_cast<const char*>(c.data_ptr<float>()), c.numel() * sizeof(float));
  }
  return 0;
}

int compare(const char* p1, const char* p2) {
  auto load = [](const char* p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  auto x = load(p1), y = load(p2);
  if (x.size() != y.size() || x.empty()) {
    std::printf("COMPARE size mismatch (%zu vs %zu)\n", x.size(), y.size());
    return 1;
  }
  const float* fx = reinterpret_cast<const float*>(x.data());
  const float* fy = reinterpret_cast<const float*>(y.data());
  double m = 0;
  for (size_t i = 0; i < x.size() / sizeof(float); ++i) m = std::max(m, std::fabs(double(fx[i]) - fy[i]));
  std::printf("COMPARE %s %s max_abs_diff=%.3e\n", p1, p2, m);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  std::string mode = argc > 1 ? argv[1] : "bench";
  if (mode == "compare" && argc > 3) return compare(argv[2], argv[3]);
  print_blas_info();
  if (mode == "bench") return bench(argc > 2 ? std::atoi(argv[2]) : 3, argc > 3 ? std::atof(argv[3]) : 30.0);
  if (mode == "check" && argc > 2) return check(argv[2]);
  std::fprintf(stderr, "usage: blas_bench bench [samples] [target_ms] | check out.bin | compare a.bin b.bin\n");
  return 2;
}
