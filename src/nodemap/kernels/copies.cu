// Kernels of `nodemap bench copies` and its latency probes, compiled at run
// time by NVRTC through CuPy.
//
//   spin      holds a stream until the host writes flag[0] (nvbandwidth's
//             trick: copies and events queue behind it, so launch and queue
//             cost stay out of the timed region); gives up after timeout_ns
//             and says so in flag[1], so a lost release never hangs a GPU.
//   copy16    the SM copy: 16-byte loads and stores, 4 in flight per thread.
//   fill      a position-dependent pattern, so a copy that skips, repeats or
//   check     shifts data is caught (check counts the mismatching words).
//   chase     dependent loads over a random cycle: load-to-use latency.

__device__ __forceinline__ unsigned long long nm_now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void spin(volatile int *flag, unsigned long long timeout_ns) {
    unsigned long long t0 = nm_now_ns();
    while (flag[0] == 0) {
        if (nm_now_ns() - t0 > timeout_ns) {
            flag[1] = 1;
            return;
        }
        __nanosleep(200);
    }
}

extern "C" __global__ void copy16(const uint4 *__restrict__ src, uint4 *__restrict__ dst, long long n16) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v0 = src[i], v1 = src[i + stride], v2 = src[i + 2 * stride], v3 = src[i + 3 * stride];
        dst[i] = v0;
        dst[i + stride] = v1;
        dst[i + 2 * stride] = v2;
        dst[i + 3 * stride] = v3;
    }
    for (; i < n16; i += stride) dst[i] = src[i];
}

// The same hash as nodemap.bench.gpu.common.pattern (numpy), word by word.
__device__ __forceinline__ unsigned nm_pattern(unsigned long long i, unsigned seed) {
    unsigned x = (unsigned)i * 0x9E3779B1u ^ (unsigned)(i >> 32) ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

extern "C" __global__ void fill(unsigned *p, long long nwords, unsigned seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nwords;
         i += (long long)gridDim.x * blockDim.x)
        p[i] = nm_pattern(i, seed);
}

extern "C" __global__ void check(const unsigned *p, long long nwords, unsigned seed, unsigned long long *bad) {
    unsigned long long n = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nwords;
         i += (long long)gridDim.x * blockDim.x)
        n += p[i] != nm_pattern(i, seed);
    if (n) atomicAdd(bad, n);
}

// One thread walks `steps` links of the cycle stored in `next` (element
// indexes); the end index goes to out so the walk cannot be optimized away,
// and lets the host check it walked the cycle it built.
extern "C" __global__ void chase(const unsigned long long *next, unsigned long long start, long long steps,
                                 unsigned long long *out) {
    unsigned long long i = start;
    for (long long k = 0; k < steps; k++) i = __ldcv(next + i);
    out[0] = i;
}
