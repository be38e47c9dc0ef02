// Kernels of `nodemap bench jacobi`, compiled at run time by NVRTC through CuPy.
//
//   jacobi_f32 / jacobi_f64  one 5-point Jacobi update of local rows
//            [row_lo, row_hi) of a slab stored row-major with NX columns;
//            columns 0 and NX-1 are fixed. A thread owns one column and walks
//            `rows_per_block` rows down it, keeping the cells above and at
//            the current row in registers: each cell is read from memory
//            once (left/right neighbours come from the lines the warp just
//            loaded) and written once, the fewest bytes a step can move.
//            With `with_norm`, the squared residual (new - old)^2 is summed
//            in double (the same for both precisions, so the norm does not
//            depend on the decomposition beyond summation order), reduced
//            per block and added to *norm with one atomic per block.
//   jacobi_box_f32 / jacobi_box_f64  the scalar update of local rows
//            [row_lo, row_hi) and columns [col_lo, col_hi) only (tiles of
//            --decomp 2d, overlapped: a tile's boundary rows and columns on
//            one stream, its interior on another; neither touches the halo
//            columns a neighbour writes meanwhile). jacobi_f32/f64 are the
//            box of every column between the fixed ones.
//   init_f32 / init_f64      the initial field of rows [1, rows-1) whose
//            first owned row is global row `g0`: the twin of
//            nodemap/bench/app/jacobi_host.py's initial() (exact binary
//            fractions, never zeros). Halo rows are left to the caller.
//
//   jacobi_f32_v2 / jacobi_f32_v4 / jacobi_f64_v2  the same update with a
//            thread owning V adjacent columns, loaded and stored as one
//            vector (float2/float4/double2; NX must be a multiple of V, so
//            rows stay aligned). Fewer, wider memory requests keep more bytes
//            in flight per thread: the scalar fp32 kernel reached 86% of a
//            device copy on an H100, the same bytes a step moves
//            (benchmarks/jacobi_kernel_sweep.py). The fixed columns 0 and
//            NX-1 fall inside the first and last vector of a row and are
//            written back unchanged, so the result equals the scalar kernel's
//            bit for bit.
// The sum order ((right + left) + below) + above matches NVIDIA's
// multi-gpu-programming-models kernel and the NumPy twin.

template <typename T>
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// The block's sum of `acc` added to *norm with one atomic (every thread of the block must call it).
__device__ __forceinline__ void block_add(double *norm, double acc) {
    __shared__ double part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    acc = warp_sum<double>(acc);
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0;
        acc = warp_sum<double>(acc);
        if (lane == 0 && acc != 0.0) atomicAdd(norm, acc);
    }
}

template <typename T>
__device__ __forceinline__ void jacobi_box(T *__restrict__ a_new, const T *__restrict__ a,
                                           double *__restrict__ norm, long long nx, int row_lo, int row_hi,
                                           long long col_lo, long long col_hi, int rows_per_block, int with_norm) {
    const long long ix = blockIdx.x * (long long)blockDim.x + threadIdx.x + col_lo;
    const int y0 = row_lo + blockIdx.y * rows_per_block;
    const int y1 = min(y0 + rows_per_block, row_hi);
    double acc = 0.0;
    if (ix < col_hi && y0 < y1) {
        T up = a[(long long)(y0 - 1) * nx + ix];
        T mid = a[(long long)y0 * nx + ix];
        for (int iy = y0; iy < y1; ++iy) {
            const long long c = (long long)iy * nx + ix;
            const T down = a[c + nx];
            const T v = (T)0.25 * (a[c + 1] + a[c - 1] + down + up);
            a_new[c] = v;
            if (with_norm) {
                const double r = (double)v - (double)mid;
                acc += r * r;
            }
            up = mid;
            mid = down;
        }
    }
    if (with_norm) block_add(norm, acc);  // uniform over the block: every thread reaches the barrier
}

template <typename T>
__device__ void jacobi_rows(T *__restrict__ a_new, const T *__restrict__ a, double *__restrict__ norm,
                            long long nx, int row_lo, int row_hi, int rows_per_block, int with_norm) {
    jacobi_box<T>(a_new, a, norm, nx, row_lo, row_hi, 1, nx - 1, rows_per_block, with_norm);
}

template <typename T, int V> struct Vec;
template <> struct Vec<float, 2> { typedef float2 type; };
template <> struct Vec<float, 4> { typedef float4 type; };
template <> struct Vec<double, 2> { typedef double2 type; };

template <typename T, int V>
__device__ __forceinline__ void load(T (&out)[V], const T *p) {
    const typename Vec<T, V>::type v = *reinterpret_cast<const typename Vec<T, V>::type *>(p);
    const T *e = reinterpret_cast<const T *>(&v);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = e[k];
}

template <typename T, int V>
__device__ __forceinline__ void store(T *p, const T (&in)[V]) {
    typename Vec<T, V>::type v;
    T *e = reinterpret_cast<T *>(&v);
#pragma unroll
    for (int k = 0; k < V; ++k) e[k] = in[k];
    *reinterpret_cast<typename Vec<T, V>::type *>(p) = v;
}

template <typename T, int V>
__device__ void jacobi_rows_vec(T *__restrict__ a_new, const T *__restrict__ a, double *__restrict__ norm,
                                long long nx, int row_lo, int row_hi, int rows_per_block, int with_norm) {
    const long long x0 = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * V;
    const int y0 = row_lo + blockIdx.y * rows_per_block;
    const int y1 = min(y0 + rows_per_block, row_hi);
    double acc = 0.0;
    if (x0 < nx && y0 < y1) {
        T up[V], mid[V], down[V], out[V];
        load<T, V>(up, a + (long long)(y0 - 1) * nx + x0);
        load<T, V>(mid, a + (long long)y0 * nx + x0);
        for (int iy = y0; iy < y1; ++iy) {
            const long long c = (long long)iy * nx + x0;
            load<T, V>(down, a + c + nx);
            // the neighbours outside this vector: the lines the warp just read
            const T left = x0 > 0 ? a[c - 1] : (T)0;
            const T right = x0 + V < nx ? a[c + V] : (T)0;
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const T l = k == 0 ? left : mid[k - 1];
                const T r = k == V - 1 ? right : mid[k + 1];
                const bool fixed = x0 + k == 0 || x0 + k == nx - 1;
                out[k] = fixed ? mid[k] : (T)0.25 * (r + l + down[k] + up[k]);
                if (with_norm && !fixed) {
                    const double d = (double)out[k] - (double)mid[k];
                    acc += d * d;
                }
            }
            store<T, V>(a_new + c, out);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                up[k] = mid[k];
                mid[k] = down[k];
            }
        }
    }
    if (with_norm) block_add(norm, acc);  // uniform over the block: every thread reaches the barrier
}

template <typename T>
__device__ void init_rows(T *__restrict__ a, long long nx, int rows, long long g0) {
    const long long n = (long long)(rows - 2) * nx;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long y = i / nx, x = i - y * nx;
        const long long g = g0 + y;
        double v;
        if (x == 0)
            v = 1.0 - (double)(g % 256) / 256.0;
        else if (x == nx - 1)
            v = (double)(g % 128) / 128.0;
        else
            v = (double)((g * 7919 + x * 6007) % 4093) / 4096.0;
        a[nx + i] = (T)v;
    }
}

extern "C" __global__ void jacobi_f32(float *a_new, const float *a, double *norm, long long nx, int row_lo,
                                      int row_hi, int rows_per_block, int with_norm) {
    jacobi_rows<float>(a_new, a, norm, nx, row_lo, row_hi, rows_per_block, with_norm);
}

extern "C" __global__ void jacobi_f64(double *a_new, const double *a, double *norm, long long nx, int row_lo,
                                      int row_hi, int rows_per_block, int with_norm) {
    jacobi_rows<double>(a_new, a, norm, nx, row_lo, row_hi, rows_per_block, with_norm);
}

extern "C" __global__ void jacobi_box_f32(float *a_new, const float *a, double *norm, long long nx, int row_lo,
                                          int row_hi, long long col_lo, long long col_hi, int rows_per_block,
                                          int with_norm) {
    jacobi_box<float>(a_new, a, norm, nx, row_lo, row_hi, col_lo, col_hi, rows_per_block, with_norm);
}

extern "C" __global__ void jacobi_box_f64(double *a_new, const double *a, double *norm, long long nx, int row_lo,
                                          int row_hi, long long col_lo, long long col_hi, int rows_per_block,
                                          int with_norm) {
    jacobi_box<double>(a_new, a, norm, nx, row_lo, row_hi, col_lo, col_hi, rows_per_block, with_norm);
}

extern "C" __global__ void init_f32(float *a, long long nx, int rows, long long g0) {
    init_rows<float>(a, nx, rows, g0);
}

extern "C" __global__ void init_f64(double *a, long long nx, int rows, long long g0) {
    init_rows<double>(a, nx, rows, g0);
}

extern "C" __global__ void jacobi_f32_v2(float *a_new, const float *a, double *norm, long long nx, int row_lo,
                                         int row_hi, int rows_per_block, int with_norm) {
    jacobi_rows_vec<float, 2>(a_new, a, norm, nx, row_lo, row_hi, rows_per_block, with_norm);
}

extern "C" __global__ void jacobi_f32_v4(float *a_new, const float *a, double *norm, long long nx, int row_lo,
                                         int row_hi, int rows_per_block, int with_norm) {
    jacobi_rows_vec<float, 4>(a_new, a, norm, nx, row_lo, row_hi, rows_per_block, with_norm);
}

extern "C" __global__ void jacobi_f64_v2(double *a_new, const double *a, double *norm, long long nx, int row_lo,
                                         int row_hi, int rows_per_block, int with_norm) {
    jacobi_rows_vec<double, 2>(a_new, a, norm, nx, row_lo, row_hi, rows_per_block, with_norm);
}
