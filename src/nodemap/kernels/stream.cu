// BabelStream's kernels (copy, mul, add, triad, nstream, dot) for
// `nodemap bench gpu`, compiled at run time by NVRTC through CuPy.
//
// Every thread moves whole 16-byte vectors (one LDG.128/STG.128 per array):
// the widest access a Hopper SM issues, and the fewest instructions per byte.
// The host sizes arrays to a multiple of the vector width, so no tail code.
// Grid-stride loops let the host pick the grid (by default just enough
// blocks for U vectors per thread) without changing the kernels.

template <typename T>
struct alignas(16) V {
    static constexpr int N = 16 / sizeof(T);
    T x[N];
};

#define NM_LOOP(i, nvec) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (nvec); \
         i += (long long)gridDim.x * blockDim.x)

// Each thread takes U vectors blockDim apart (coalesced across the warp) and
// issues all U loads before the first store: U x 16 bytes in flight per
// thread. Op::load reads one vector index, Op::store computes and writes it.
template <int U, typename Op>
__device__ __forceinline__ void stream_run(const Op &op, long long nvec) {
    const long long bd = blockDim.x, step = (long long)gridDim.x * bd * U;
    for (long long i = blockIdx.x * bd * U + threadIdx.x; i < nvec; i += step) {
        typename Op::R r[U];
#pragma unroll
        for (int k = 0; k < U; k++)
            if (i + k * bd < nvec) r[k] = op.load(i + k * bd);
#pragma unroll
        for (int k = 0; k < U; k++)
            if (i + k * bd < nvec) op.store(i + k * bd, r[k]);
    }
}

template <typename T>
struct Init {
    V<T> *a, *b, *c;
    T ia, ib, ic;
    struct R {};
    __device__ R load(long long) const { return {}; }
    __device__ void store(long long i, const R &) const {
        V<T> va, vb, vc;
#pragma unroll
        for (int k = 0; k < V<T>::N; k++) { va.x[k] = ia; vb.x[k] = ib; vc.x[k] = ic; }
        a[i] = va; b[i] = vb; c[i] = vc;
    }
};

template <typename T>
struct Copy {  // c = a
    const V<T> *__restrict__ a;
    V<T> *__restrict__ c;
    struct R { V<T> a; };
    __device__ R load(long long i) const { return {a[i]}; }
    __device__ void store(long long i, const R &r) const { c[i] = r.a; }
};

template <typename T>
struct Mul {  // b = s * c
    V<T> *__restrict__ b;
    const V<T> *__restrict__ c;
    T s;
    struct R { V<T> c; };
    __device__ R load(long long i) const { return {c[i]}; }
    __device__ void store(long long i, const R &r) const {
        V<T> v;
#pragma unroll
        for (int k = 0; k < V<T>::N; k++) v.x[k] = s * r.c.x[k];
        b[i] = v;
    }
};

template <typename T>
struct Add {  // c = a + b
    const V<T> *__restrict__ a;
    const V<T> *__restrict__ b;
    V<T> *__restrict__ c;
    struct R { V<T> a, b; };
    __device__ R load(long long i) const { return {a[i], b[i]}; }
    __device__ void store(long long i, const R &r) const {
        V<T> v;
#pragma unroll
        for (int k = 0; k < V<T>::N; k++) v.x[k] = r.a.x[k] + r.b.x[k];
        c[i] = v;
    }
};

template <typename T>
struct Triad {  // a = b + s * c
    V<T> *__restrict__ a;
    const V<T> *__restrict__ b;
    const V<T> *__restrict__ c;
    T s;
    struct R { V<T> b, c; };
    __device__ R load(long long i) const { return {b[i], c[i]}; }
    __device__ void store(long long i, const R &r) const {
        V<T> v;
#pragma unroll
        for (int k = 0; k < V<T>::N; k++) v.x[k] = r.b.x[k] + s * r.c.x[k];
        a[i] = v;
    }
};

template <typename T>
struct Nstream {  // a += b + s * c
    V<T> *__restrict__ a;
    const V<T> *__restrict__ b;
    const V<T> *__restrict__ c;
    T s;
    struct R { V<T> a, b, c; };
    __device__ R load(long long i) const { return {a[i], b[i], c[i]}; }
    __device__ void store(long long i, const R &r) const {
        V<T> v;
#pragma unroll
        for (int k = 0; k < V<T>::N; k++) v.x[k] = r.a.x[k] + r.b.x[k] + s * r.c.x[k];
        a[i] = v;
    }
};

// One partial sum per block (the host adds gridDim.x of them), as
// BabelStream's CUDA dot; blockDim.x must be a power of two <= 1024.
template <typename T>
__device__ void dot_k(const V<T> *__restrict__ a, const V<T> *__restrict__ b, T *__restrict__ sums, long long nvec) {
    __shared__ T tb[1024];
    T acc = 0;
    NM_LOOP(i, nvec) {
        V<T> va = a[i], vb = b[i];
#pragma unroll
        for (int k = 0; k < V<T>::N; k++) acc += va.x[k] * vb.x[k];
    }
    tb[threadIdx.x] = acc;
    for (int off = blockDim.x / 2; off > 0; off /= 2) {
        __syncthreads();
        if (threadIdx.x < off) tb[threadIdx.x] += tb[threadIdx.x + off];
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = tb[0];
}

// Kernels named op_dtype_uU for U vectors per thread (1, 2, 4).
#define NM_STREAM_UNROLLED(T, S, U)                                                                      \
    extern "C" __global__ void copy_##S##_u##U(const V<T> *a, V<T> *c, long long nvec) {              \
        stream_run<U>(Copy<T>{a, c}, nvec);                                                            \
    }                                                                                                  \
    extern "C" __global__ void mul_##S##_u##U(V<T> *b, const V<T> *c, T s, long long nvec) {         \
        stream_run<U>(Mul<T>{b, c, s}, nvec);                                                          \
    }                                                                                                  \
    extern "C" __global__ void add_##S##_u##U(const V<T> *a, const V<T> *b, V<T> *c, long long nvec) { \
        stream_run<U>(Add<T>{a, b, c}, nvec);                                                          \
    }                                                                                                  \
    extern "C" __global__ void triad_##S##_u##U(V<T> *a, const V<T> *b, const V<T> *c, T s, long long nvec) { \
        stream_run<U>(Triad<T>{a, b, c, s}, nvec);                                                     \
    }                                                                                                  \
    extern "C" __global__ void nstream_##S##_u##U(V<T> *a, const V<T> *b, const V<T> *c, T s, long long nvec) { \
        stream_run<U>(Nstream<T>{a, b, c, s}, nvec);                                                   \
    }

#define NM_STREAM_KERNELS(T, S)                                                                          \
    extern "C" __global__ void init_##S(V<T> *a, V<T> *b, V<T> *c, T ia, T ib, T ic, long long nvec) { \
        stream_run<1>(Init<T>{a, b, c, ia, ib, ic}, nvec);                                             \
    }                                                                                                  \
    extern "C" __global__ void dot_##S(const V<T> *a, const V<T> *b, T *sums, long long nvec) {       \
        dot_k<T>(a, b, sums, nvec);                                                                    \
    }                                                                                                  \
    NM_STREAM_UNROLLED(T, S, 1)                                                                        \
    NM_STREAM_UNROLLED(T, S, 2)                                                                        \
    NM_STREAM_UNROLLED(T, S, 4)

NM_STREAM_KERNELS(double, f64)
NM_STREAM_KERNELS(float, f32)
