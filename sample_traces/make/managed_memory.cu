// managed_memory: managed (unified) memory touched on the host, then used by a kernel, so every
// step pays page faults and on-demand migrations; recorded by Nsight Systems with UM fault
// tracing (run_counters.sh: `nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none
// --cuda-um-cpu-page-faults=true --cuda-um-gpu-page-faults=true`, from process start) into
// tests/data/counters/managed_memory.sqlite.gz.
//
// One buffer of BYTES = 64 MiB from cudaMallocManaged (16 Mi floats; far below the card's free
// memory). Each step (inside an NVTX range step_N in `capture`): the host writes every element
// (x[i] = (i + step) & 1023: the pages the last kernel left on the GPU fault back to the host),
// then a grid-stride kernel x = 2 x + 1 (4 blocks of 256 threads per SM) on a stream, then
// cudaStreamSynchronize. On the GPU the kernel's first touch of each page faults and the driver
// migrates it host-to-device on demand.
// The fix: cudaMemPrefetchAsync(x, BYTES, device) on the same stream before the kernel (one bulk
// migration, no GPU faults). The CPU faults of the host touch stay in both.
//
// usage: managed_memory capture      8 steps, faulting variant, NVTX ranges step_0..step_7
//                                    (no warm-up: step_0 also holds the first touch)
//        managed_memory time         no profiler: each variant WARMUP = 3 steps, then TIMED =
//                                    30 steps, mean ms per step (host clock), ROUNDS = 3
//                                    interleaved; also the kernel+migration part of the step
//                                    (after the host touch) and the host touch alone. Variants:
//                                    fault; prefetch (to the device before the kernel: the
//                                    fix); prefetch_both (also back to the host after the
//                                    kernel, so the host touch takes no CPU faults either)
// Build: nvcc -O2 -arch=sm_90 -o managed_memory managed_memory.cu -ldl
// Expected: a managed-memory finding: GPU page faults and on-demand HtoD migrations inside every
// step's kernel (which runs far longer than its 64 MiB of work needs), and CPU faults with DtoH
// migrations in the host touch; priced about fault_step_ms - prefetch_step_ms.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static const size_t BYTES = 64ull << 20;
static const int WARMUP = 3, TIMED = 30, ROUNDS = 3, CAPTURE_STEPS = 8;
static const int VARIANTS = 3;  // 0 fault, 1 prefetch to the device, 2 also back to the host

__global__ void axpb(float* x, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (; i < n; i += stride) x[i] = x[i] * 2.0f + 1.0f;
}

static double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

static void host_touch(float* x, size_t n, int step) {
  for (size_t i = 0; i < n; ++i) x[i] = (float)((i + (size_t)step) & 1023);
}

// dev >= 0: to that device; dev < 0: to the host
static void prefetch(float* x, size_t bytes, int dev, cudaStream_t s) {
#if CUDART_VERSION >= 13000
  cudaMemLocation loc;
  memset(&loc, 0, sizeof(loc));
  loc.type = dev >= 0 ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  loc.id = dev >= 0 ? dev : 0;
  CK(cudaMemPrefetchAsync(x, bytes, loc, 0, s));
#else
  CK(cudaMemPrefetchAsync(x, bytes, dev >= 0 ? dev : cudaCpuDeviceId, s));
#endif
}

struct Ctx {
  float* x;
  size_t n;
  int dev, grid;
  cudaStream_t s;
};

// One step of variant v; adds its times (ms) to the three sums.
static void step(const Ctx& c, int i, int v, double* all, double* gpu_part, double* touch) {
  double t0 = now_ms();
  host_touch(c.x, c.n, i);
  double t1 = now_ms();
  if (v >= 1) prefetch(c.x, c.n * sizeof(float), c.dev, c.s);
  axpb<<<c.grid, 256, 0, c.s>>>(c.x, c.n);
  CK(cudaGetLastError());
  if (v == 2) prefetch(c.x, c.n * sizeof(float), -1, c.s);
  CK(cudaStreamSynchronize(c.s));
  double t2 = now_ms();
  *all += t2 - t0;
  *gpu_part += t2 - t1;
  *touch += t1 - t0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "time";
  Ctx c;
  CK(cudaGetDevice(&c.dev));
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, c.dev));
  int cma = 0, pma = 0;
  CK(cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, c.dev));
  CK(cudaDeviceGetAttribute(&pma, cudaDevAttrPageableMemoryAccess, c.dev));
  int rt = 0, drv = 0;
  CK(cudaRuntimeGetVersion(&rt));
  CK(cudaDriverGetVersion(&drv));
  c.grid = p.multiProcessorCount * 4;
  c.n = BYTES / sizeof(float);
  printf("FACT {\"scenario\": \"managed_memory\", \"gpu\": \"%s\", \"sms\": %d, "
         "\"concurrent_managed_access\": %d, \"pageable_memory_access\": %d, "
         "\"cuda_runtime\": %d, \"cuda_driver\": %d, \"bytes\": %zu, \"grid\": %d, \"block\": 256}\n",
         p.name, p.multiProcessorCount, cma, pma, rt, drv, BYTES, c.grid);
  CK(cudaMallocManaged(&c.x, BYTES));
  CK(cudaStreamCreate(&c.s));
  double a = 0, g = 0, t = 0;
  if (strcmp(mode, "capture") == 0) {
    printf("FACT {\"scenario\": \"managed_memory\", \"truth\": {\"expect\": \"managed-memory "
           "finding: GPU page faults and on-demand HtoD migrations inside every step's kernel, "
           "CPU faults and DtoH migrations in the host touch; priced about fault_step_ms - "
           "prefetch_step_ms\", \"fix\": \"cudaMemPrefetchAsync(x, bytes, device) before the "
           "kernel\"}}\n");
    char name[32];
    for (int i = 0; i < CAPTURE_STEPS; ++i) {
      snprintf(name, sizeof name, "step_%d", i);
      nvtxRangePushA(name);
      double a0 = a, g0 = g, t0 = t;
      step(c, i, 0, &a, &g, &t);
      nvtxRangePop();
      printf("FACT {\"scenario\": \"managed_memory\", \"step\": \"%s\", \"step_ms\": %.3f, "
             "\"gpu_part_ms\": %.3f, \"host_touch_ms\": %.3f}\n",
             name, a - a0, g - g0, t - t0);
    }
  } else {
    double sums[VARIANTS][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
    char rounds[VARIANTS][256] = {"", "", ""};
    int k = 0;
    for (int r = 0; r < ROUNDS; ++r) {
      for (int v = 0; v < VARIANTS; ++v) {
        double d0 = 0, d1 = 0, d2 = 0;
        for (int i = 0; i < WARMUP; ++i) step(c, k++, v, &d0, &d1, &d2);
        CK(cudaDeviceSynchronize());
        double x0 = 0, x1 = 0, x2 = 0;
        for (int i = 0; i < TIMED; ++i) step(c, k++, v, &x0, &x1, &x2);
        CK(cudaDeviceSynchronize());
        sums[v][0] += x0 / TIMED;
        sums[v][1] += x1 / TIMED;
        sums[v][2] += x2 / TIMED;
        size_t len = strlen(rounds[v]);
        snprintf(rounds[v] + len, sizeof rounds[v] - len, "%s%.3f", r ? ", " : "", x0 / TIMED);
      }
    }
    for (int v = 0; v < VARIANTS; ++v)
      for (int j = 0; j < 3; ++j) sums[v][j] /= ROUNDS;
    printf("FACT {\"scenario\": \"managed_memory\", \"fault_step_ms\": %.3f, "
           "\"prefetch_step_ms\": %.3f, \"saving_ms\": %.3f, \"saving_share\": %.4f, "
           "\"fault_gpu_part_ms\": %.3f, \"prefetch_gpu_part_ms\": %.3f, "
           "\"gpu_part_saving_ms\": %.3f, "
           "\"fault_host_touch_ms\": %.3f, \"prefetch_host_touch_ms\": %.3f, "
           "\"prefetch_both_step_ms\": %.3f, \"prefetch_both_gpu_part_ms\": %.3f, "
           "\"prefetch_both_host_touch_ms\": %.3f, "
           "\"fault_rounds_ms\": [%s], \"prefetch_rounds_ms\": [%s], "
           "\"prefetch_both_rounds_ms\": [%s], \"warmup\": %d, \"timed\": %d, \"rounds\": %d}\n",
           sums[0][0], sums[1][0], sums[0][0] - sums[1][0], (sums[0][0] - sums[1][0]) / sums[0][0],
           sums[0][1], sums[1][1], sums[0][1] - sums[1][1], sums[0][2], sums[1][2], sums[2][0],
           sums[2][1], sums[2][2], rounds[0], rounds[1], rounds[2], WARMUP, TIMED, ROUNDS);
  }
  CK(cudaFree(c.x));
  CK(cudaStreamDestroy(c.s));
  return 0;
}
