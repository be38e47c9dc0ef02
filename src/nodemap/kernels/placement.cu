// Kernels of `nodemap bench placement`: fill a table of fixed-size rows,
// gather rows by key (optionally counting accesses per chunk), checksum.
#include "access_counter.cuh"

typedef unsigned long long u64;

// Word w of row r: a cheap integer hash, reproducible on the host
// (nodemap.bench.app.placement.row_word) so checksums can be verified.
__device__ __forceinline__ u64 nm_row_word(u64 r, u64 w) {
    u64 x = r * 0x9E3779B97F4A7C15ull + w * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x;
}

extern "C" __global__ void nm_fill_rows(u64 *table, u64 rows, unsigned int words_per_row) {
    u64 n = rows * words_per_row;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        table[i] = nm_row_word(i / words_per_row, i % words_per_row);
    }
}

// One thread per lookup: read one row (16-byte loads) and add it into a
// per-thread sum; one atomic per block adds the block's sum to *checksum.
// counts != 0 turns on the access counter (profiling pass).
extern "C" __global__ void nm_gather_rows(const u64 *__restrict__ table, const long long *__restrict__ rows_idx,
                                          u64 lookups, unsigned int words_per_row, u64 *checksum,
                                          unsigned long long *counts, unsigned int chunk_shift,
                                          unsigned int sample_every) {
    __shared__ u64 block_sum;
    if (threadIdx.x == 0) block_sum = 0;
    __syncthreads();
    u64 local = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < lookups; i += (u64)gridDim.x * blockDim.x) {
        u64 r = (u64)rows_idx[i];
        const ulonglong2 *row = reinterpret_cast<const ulonglong2 *>(table + r * words_per_row);
        #pragma unroll 4
        for (unsigned int w = 0; w < words_per_row / 2; ++w) {
            ulonglong2 v = row[w];
            local += v.x + v.y;
        }
        if (counts && nm_sampled(i, sample_every)) {
            nm_count_access(counts, r * words_per_row * sizeof(u64), chunk_shift);
        }
    }
    atomicAdd(&block_sum, local);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(checksum, block_sum);
}
