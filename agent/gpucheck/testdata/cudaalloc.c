/*
 * cudaalloc: a CUDA process with a known GPU footprint, for the agent's GPU check.
 *
 *   cudaalloc BYTES SECONDS [DEVICE]
 *
 * Allocates BYTES of device memory on DEVICE (default 0) and keeps one SM busy with
 * a spin kernel (JIT-compiled from the PTX below) until SECONDS have passed, then
 * exits. Prints "READY pid=<pid> bytes=<BYTES>" on stdout once the memory is held
 * and the first kernel runs.
 *
 * It uses only the CUDA driver API, loaded with dlopen from libcuda.so.1, so it
 * builds with gcc alone (no CUDA toolkit): gcc -O2 -o cudaalloc cudaalloc.c -ldl
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

static const char *ptx =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 cycles)\n"
    "{\n"
    "  .reg .u64 %rd<5>;\n"
    "  .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [cycles];\n"
    "  mov.u64 %rd2, %clock64;\n"
    "LOOP:\n"
    "  mov.u64 %rd3, %clock64;\n"
    "  sub.u64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.u64 %p1, %rd4, %rd1;\n"
    "  @%p1 bra LOOP;\n"
    "  ret;\n"
    "}\n";

static void *lib;
static CUresult (*cuGetErrorString)(CUresult, const char **);

static void *sym(const char *name) {
  void *f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "cudaalloc: %s not found in libcuda.so.1\n", name);
    exit(2);
  }
  return f;
}

static void check(CUresult r, const char *what) {
  if (r != 0) {
    const char *msg = "unknown";
    if (cuGetErrorString) cuGetErrorString(r, &msg);
    fprintf(stderr, "cudaalloc: %s failed: %d (%s)\n", what, r, msg);
    exit(1);
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cudaalloc BYTES SECONDS [DEVICE]\n");
    return 2;
  }
  unsigned long long bytes = strtoull(argv[1], NULL, 10);
  double seconds = atof(argv[2]);
  int ordinal = argc > 3 ? atoi(argv[3]) : 0;

  lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "cudaalloc: cannot load libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  cuGetErrorString = (CUresult(*)(CUresult, const char **))sym("cuGetErrorString");
  CUresult (*cuInit)(unsigned) = sym("cuInit");
  CUresult (*cuDeviceGet)(CUdevice *, int) = sym("cuDeviceGet");
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
  CUresult (*cuCtxSetCurrent)(CUcontext) = sym("cuCtxSetCurrent");
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = sym("cuMemsetD8_v2");
  CUresult (*cuModuleLoadData)(CUmodule *, const void *) = sym("cuModuleLoadData");
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *) = sym("cuModuleGetFunction");
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **) = sym("cuLaunchKernel");
  CUresult (*cuCtxSynchronize)(void) = sym("cuCtxSynchronize");

  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr ptr;
  CUmodule mod;
  CUfunction fn;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cuMemAlloc(&ptr, bytes), "cuMemAlloc");
  check(cuMemsetD8(ptr, 1, bytes), "cuMemsetD8");
  check(cuModuleLoadData(&mod, ptx), "cuModuleLoadData");
  check(cuModuleGetFunction(&fn, mod, "spin"), "cuModuleGetFunction");

  /* About 50 ms per launch at 2 GHz; one block of one thread keeps the GPU "busy"
   * in NVML's sense (a kernel is running) all the time. */
  unsigned long long cycles = 100000000ULL;
  void *args[] = {&cycles};
  double end = now() + seconds;
  int ready = 0;
  while (now() < end) {
    check(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
    if (!ready) {
      printf("READY pid=%d bytes=%llu\n", (int)getpid(), bytes);
      fflush(stdout);
      ready = 1;
    }
    check(cuCtxSynchronize(), "cuCtxSynchronize");
  }
  return 0;
}
